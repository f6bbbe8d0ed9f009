"""The ``tiny`` claim runs end to end through the runner and measures what it says."""

from pathlib import Path

import torch

from icml26 import claims_index
from icml26.core.claims import run_claim
from icml26.quartet2.claim import ZERO, power_checks


def test_tiny_claim_runs(tmp_path):
    threads = torch.get_num_threads()
    try:  # one thread: many small ops, and 2 threads collapse when the machine is shared
        rec = run_claim(claims_index.get("quartet2"), scale="tiny",
                        out_root=tmp_path, threads=1)
    finally:
        torch.set_num_threads(threads)
    assert rec["error"] is None, rec["error"]
    assert rec["verdict"] in ("reproduced", "not reproduced", "inconclusive", "uninformative")
    checks = rec["power"]["checks"]
    assert [c["kind"] for c in checks] == list(claims_index.get("quartet2").power.kinds)
    assert all(c["passed"] in (True, False, None) for c in checks)
    control, floor = checks
    assert set(control["systems"]) == {"rtn", "sr"}
    assert floor["values"][ZERO] == 1.0
    assert floor["passed"] is True  # both stochastic estimators are far below relative MSE 1
    lo, hi = rec["headline"]["spread"]
    assert lo <= rec["headline"]["value"] <= hi
    rows = {(r["experiment"], r["system"], r["metric"]): r for r in rec["rows"]}
    gauss = {s: rows[("quantizer error, Gaussian rows", s, "relative MSE")]["value"]
             for s in ("rtn", "sr", "ms_eden", "four_over_six")}
    # the paper's ordering on heavy-tailed Gaussian rows: 4/6 < RTN < MS-EDEN << SR
    assert gauss["four_over_six"] < gauss["rtn"] < gauss["ms_eden"] < gauss["sr"] / 2
    systems = {r["system"] for r in rec["rows"] if r["experiment"].startswith("pre-training")}
    assert {"fp32", "nvidia", "quartet2"} <= systems
    assert len(rec["figures"]) == 3
    assert all((Path(tmp_path) / f).is_file() for f in rec["figures"])


def test_power_checks_decide_on_the_draws():
    real = {"ms_eden": [0.01, 0.011], "sr": [0.023, 0.024]}
    # RTN's slope clearly below SR's over every draw: the bias measurement has power
    control, floor = power_checks({"rtn": [0.5, 0.55, 0.6], "sr": [0.98, 1.0, 1.02]}, real, 1.0, "m")
    assert control.passed is True and floor.passed is True
    # the draws overlap: RTN cannot be told from SR, the control fails
    control, _ = power_checks({"rtn": [0.8, 0.95, 1.0], "sr": [0.9, 1.0, 1.03]}, real, 1.0, "m")
    assert control.passed is False
    # estimators no better than predicting zero: the floor fails
    _, floor = power_checks({"rtn": [0.5], "sr": [1.0]}, {"ms_eden": [1.2], "sr": [1.5]}, 1.0, "m")
    assert floor.passed is False
