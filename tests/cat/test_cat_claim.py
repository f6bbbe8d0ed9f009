"""The ``cat`` claim at ``tiny`` scale runs end to end and its rows are consistent."""

import os

from icml26.cat.claim import run
from icml26.core.claims import Claim, run_claim


def test_tiny_claim(tmp_path):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    rec = run_claim(Claim("cat", "p", "s", "f", run=run), scale="tiny", out_root=tmp_path)
    assert rec["verdict"] != "error", rec.get("error")
    rows = {(r["system"], r["bits"]): r for r in rec["rows"]}
    assert {"rtn", "smoothquant", "hadamard", "cat-b64"} <= {s for s, _ in rows}
    rtn, had, cat = rows[("rtn", "W4A4")], rows[("hadamard", "W4A4")], rows[("cat-b64", "W4A4")]
    # a rotation leaves the alignment term unchanged; CAT raises it
    assert abs(had["median alignment dB"] - rtn["median alignment dB"]) < 0.01
    assert cat["median alignment dB"] > had["median alignment dB"]
    assert had["median concentration dB"] > rtn["median concentration dB"]
    assert rec["headline"]["value"] > 0
    assert len(rec["figures"]) == 3
