"""The ``tiny`` claim runs end to end through the runner and measures what it says."""

from pathlib import Path

import torch

from icml26.core.claims import Claim, run_claim
from icml26.quartet2.claim import run


def test_tiny_claim_runs(tmp_path):
    threads = torch.get_num_threads()
    try:  # one thread: many small ops, and 2 threads collapse when the machine is shared
        rec = run_claim(Claim("quartet2", "p", "s", "f", run=run), scale="tiny",
                        out_root=tmp_path, threads=1)
    finally:
        torch.set_num_threads(threads)
    assert rec["error"] is None, rec["error"]
    assert rec["verdict"] in ("reproduced", "not reproduced", "inconclusive")
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
