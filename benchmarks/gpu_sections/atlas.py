"""ATLAS: IRT calibration (Bock-Aitkin EM with Fisher-scoring M-steps), EAP/MLE scoring, linking
and adaptive tests are float64 numpy code (``atlas/calibrate.py``, ``scoring.py``, ``cat.py``)
with no device argument, so there is no ATLAS GPU path to check or time. The only accelerator
work in ATLAS is filling the response matrix: per-choice log-probs of an LM over the items
(``atlas/responses.py`` through ``core.mcq.score_mcq``), a plain causal-LM forward that takes
the model's device and holds nothing specific to ATLAS."""

CPU_ONLY = ("IRT EM calibration, scoring, linking and CATs are float64 numpy code without a "
            "device argument (atlas/calibrate.py, scoring.py, cat.py); the only GPU work is the "
            "plain LM forward filling the response matrix (core.mcq.score_mcq)")
