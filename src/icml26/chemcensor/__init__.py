"""ChemCensor: chemical-plausibility levels (-1..5) for single-step retrosynthesis proposals
(Zagribelnyy et al., "When Single Answer Is Not Enough: Rethinking Single-Step Retrosynthesis
Benchmarks for LLMs", ICML 2026), a precedent database, a validated-reaction builder and
plausibility@K beside exact-match Top-K.
"""

from icml26.chemcensor.db import ReactionDB
from icml26.chemcensor.evaluate import build_dataset, evaluate_topk
from icml26.chemcensor.scorer import ChemCensor, Level

__all__ = ["ChemCensor", "Level", "ReactionDB", "build_dataset", "evaluate_topk"]
