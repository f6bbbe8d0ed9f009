"""The claim: its analysis on a scripted backend (known answer), and the real tiny run."""

import json

import pytest

import icml26.algosteer.claim as claim_mod
import icml26.algosteer.grid as grid_mod
from icml26.algosteer.backends import Generation
from icml26.algosteer.sandbox import Limits
from icml26.algosteer.tasks import TASKS
from icml26.claims_index import get
from icml26.core.claims import Claim, run_claim

REF = TASKS["fib"].references
SPEC = get("algosteer").power


class Scripted:
    """no cue: iterative on every 4th request, naive otherwise (so 'none' gets 4 iterative of 8
    and 'none_resampled' none); performance: always matrix; naming: always iterative."""

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
            elif "iterative loop" in text:  # the naming cue names the iterative family
                code = REF["iterative"][0]
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
        Claim("algosteer", "p", "s", "f", run=claim_mod.run, power=SPEC),
        scale="tiny",
        out_root=tmp_path,
    )
    assert rec["error"] is None, rec["error"]
    checks = {c["kind"]: c for c in rec["power"]["checks"]}
    assert list(checks) == list(SPEC.kinds)
    # naming: all iterative vs none 50/50 -> TVD 0.5, the same as the resampled control's 0.5,
    # so the control does not separate and the verdict is uninformative
    assert checks["control"]["values"][claim_mod.CONTROL] == pytest.approx(0.5)
    assert checks["control"]["passed"] is False
    assert checks["degeneracy"]["passed"] is True  # performance: matrix, a real shift
    assert rec["verdict"] == "uninformative"
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
    assert len(lines) == 1 + 16 and json.loads(lines[0])["kind"] == "header"


@pytest.mark.slow
def test_tiny_claim_runs_on_smollm2(tmp_path):
    rec = run_claim(
        Claim("algosteer", "p", "s", "f", run=claim_mod.run, power=SPEC),
        scale="tiny",
        out_root=tmp_path,
    )
    assert rec["error"] is None, rec["error"]
    assert rec["verdict"] in ("reproduced", "not reproduced", "inconclusive", "uninformative")
    assert [c["kind"] for c in rec["power"]["checks"]] == list(SPEC.kinds)
    assert all(c["passed"] in (True, False, None) for c in rec["power"]["checks"])
    cells = [r for r in rec["rows"] if r.get("category") not in ("summary", "power")]
    assert sum(r.get("n", 0) for r in cells) == 16


class Failing:
    """Parsable programs that fail every test: no gated program at all."""

    def info(self):
        return {"backend": "failing"}

    def generate(self, requests, temperature, max_new_tokens):
        code = "def fib(n):\n    return -1\n"
        return [Generation(f"```python\n{code}```", seed) for _, seed in requests]


def test_no_informative_gated_cell_is_uninformative_not_an_ungated_headline(tmp_path, monkeypatch):
    monkeypatch.setattr(claim_mod, "make_backend", lambda ctx: (Failing(), "failing"))
    rec = run_claim(
        Claim("algosteer", "p", "s", "f", run=claim_mod.run, power=SPEC),
        scale="tiny",
        out_root=tmp_path,
    )
    assert rec["error"] is None, rec["error"]
    assert rec["verdict"] == "uninformative"
    assert "no informative gated cell" in rec["uninformative"]
    assert "ungated" not in rec["headline"]["name"].split("(")[1].split(";")[0]
    assert all(c["passed"] is None for c in rec["power"]["checks"])  # nothing measurable
    summary = {r["cue"]: r for r in rec["rows"] if r.get("category") == "summary"}
    assert "semantic/control ungated" in summary  # the ungated ratio stays a row


def _rows(cells):
    return [
        {"task": "fib", "cue": cue, "outcome": "pass", "family": fam}
        for cue, fams in cells.items()
        for fam in fams
    ]


def test_power_checks_on_known_cells():
    config = claim_mod.grid_config("tiny", samples=12)
    base = ["naive"] * 9 + ["iterative"] * 3
    strong = {
        "none": base,
        "none_resampled": ["naive"] * 10 + ["iterative"] * 2,
        "performance": ["matrix"] * 12,
        "naming": ["iterative"] * 12,
    }
    rows = _rows(strong)
    table, _ = claim_mod.analyse(rows, config, min_n=10, n_boot=200)
    checks = {c.kind: c for c in claim_mod.power_checks(rows, table, config, 10, n_boot=200)[0]}
    assert checks["control"].passed and checks["floor"].passed and checks["degeneracy"].passed
    # every cue answers like the no-cue prompt: zero changed distributions, a null control
    same = {c: base for c in strong}
    rows = _rows(same)
    table, _ = claim_mod.analyse(rows, config, min_n=10, n_boot=200)
    checks = {c.kind: c for c in claim_mod.power_checks(rows, table, config, 10, n_boot=200)[0]}
    assert checks["degeneracy"].passed is False and checks["degeneracy"].values["differing"] == 0
    assert checks["control"].passed is False and checks["floor"].passed is False


def test_small_grid_is_the_papers_core_grid_on_qwen():
    """Issue 38: small = fib, tree, dedup, rate limiter, sorting x all 23 cues x 20 samples, with
    room for Qwen2.5-Coder-0.5B's replies; tasks/cues override it and keep the two no-cue cells."""
    from icml26.algosteer.cues import CUES

    config = claim_mod.grid_config("small")
    assert config.tasks == ("fib", "tree", "dedup", "ratelimit", "sorting")
    assert set(config.cues) == set(CUES) and len(config.cues) == 23
    assert config.samples == 20 and config.max_new_tokens == 256
    assert claim_mod.SMALL_MODEL == "qwen2.5-coder-0.5b-instruct"
    cut = claim_mod.grid_config("small", tasks=["dedup"], cues=["performance", "naming"])
    assert cut.tasks == ("dedup",)
    assert cut.cues == ("none", "none_resampled", "performance", "naming")
    with pytest.raises(Exception, match="unknown task 'fibb'.*did you mean fib"):
        claim_mod.grid_config("small", tasks=["fibb"])
    with pytest.raises(Exception, match="performanse"):
        claim_mod.grid_config("small", cues=["performanse"])


def test_small_backend_defaults_to_the_qwen_zoo_model(monkeypatch):
    """``make_backend`` loads the zoo's Qwen2.5-Coder-0.5B at small and the packaged SmolLM2 at
    tiny unless ``--opt model`` names another."""
    import icml26.algosteer.backends as backends

    seen = []

    class Fake:
        def __init__(self, path, device, dtype, batch):
            seen.append(path)

    monkeypatch.setattr(backends, "HFBackend", Fake)

    class Ctx:
        device = "cpu"

        def __init__(self, scale, options):
            self.scale, self.options = scale, options

        def pick(self, **kw):
            return kw[self.scale]

    assert claim_mod.make_backend(Ctx("small", {}))[1] == "qwen2.5-coder-0.5b-instruct"
    assert claim_mod.make_backend(Ctx("tiny", {}))[1] == "smollm2"
    assert claim_mod.make_backend(Ctx("small", {"model": "x.gguf"}))[1] == "x.gguf"
    assert seen == ["qwen2.5-coder-0.5b-instruct", None, "x.gguf"]
