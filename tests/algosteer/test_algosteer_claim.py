"""The claim: its analysis on a scripted backend (known answer), and the real tiny run."""

import json

import pytest

import icml26.algosteer.claim as claim_mod
import icml26.algosteer.grid as grid_mod
from icml26.algosteer.backends import Generation
from icml26.algosteer.sandbox import Limits
from icml26.algosteer.tasks import TASKS
from icml26.core.claims import Claim, run_claim

REF = TASKS["fib"].references


class Scripted:
    """no cue: iterative on every 4th request, naive otherwise (so 'none' gets 4 iterative of 8
    and 'none_resampled' none); performance: always matrix."""

    def __init__(self):
        self.counter = 0

    def info(self):
        return {"backend": "scripted"}

    def generate(self, requests, temperature, max_new_tokens):
        out = []
        for msgs, seed in requests:
            text = msgs[-1]["content"]
            if "performance-critical" in text:
                code = REF["matrix"][0]
            else:
                code = REF["iterative"][0] if self.counter % 4 == 0 else REF["naive"][0]
                self.counter += 1
            out.append(Generation(f"Sure!\n```python\n{code}```\nDone.", seed))
        return out


def test_claim_headline_on_a_scripted_backend(tmp_path, monkeypatch):
    monkeypatch.setattr(claim_mod, "make_backend", lambda ctx: (Scripted(), "scripted"))
    # naive recursion times out on the large inputs by design; keep that wait short here
    monkeypatch.setattr(grid_mod, "_large_limits", lambda t, base, f: Limits(time_s=0.5))
    rec = run_claim(
        Claim("algosteer", "p", "s", "f", run=claim_mod.run), scale="tiny", out_root=tmp_path
    )
    assert rec["error"] is None, rec["error"]
    # TVD(performance, none) = 1 (matrix vs naive/iterative); TVD(control, none) = 0.5
    assert rec["headline"]["value"] == pytest.approx(2.0)
    assert "(gated)" in rec["headline"]["name"]
    rows = {r["cue"]: r for r in rec["rows"]}
    assert rows["none"]["gated_shares"] == "naive:50 iterative:50"
    assert rows["performance"]["max_shift_pp"] == "naive -50" or rows["performance"][
        "max_shift_pp"
    ].startswith("matrix +100")
    assert rows["performance"]["p"] < 0.05  # 4 vs 4 samples at tiny: perfect separation
    for fig in rec["figures"]:
        assert (tmp_path / fig).stat().st_size > 1000
    lines = (tmp_path / "algosteer" / "tiny" / "runs.jsonl").read_text().splitlines()
    assert len(lines) == 1 + 12 and json.loads(lines[0])["kind"] == "header"


@pytest.mark.slow
def test_tiny_claim_runs_on_smollm2(tmp_path):
    rec = run_claim(
        Claim("algosteer", "p", "s", "f", run=claim_mod.run), scale="tiny", out_root=tmp_path
    )
    assert rec["error"] is None, rec["error"]
    assert rec["verdict"] in ("reproduced", "not reproduced", "inconclusive")
    assert sum(r.get("n", 0) for r in rec["rows"] if r.get("category") != "summary") == 12
