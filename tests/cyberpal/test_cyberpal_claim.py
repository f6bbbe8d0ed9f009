"""The cyberpal claim at tiny scale, end to end (tiny_llama, 10 CWEs, 40 SFT steps per arm)."""

from icml26 import claims_index
from icml26.core.claims import run_claim


def test_tiny_claim_runs(tmp_path):
    rec = run_claim(claims_index.get("cyberpal"), scale="tiny", out_root=tmp_path, threads=1)
    assert rec["error"] is None, rec["error"]
    assert rec["verdict"] in ("reproduced", "not reproduced", "inconclusive", "uninformative")
    checks = {c["kind"]: c for c in rec["power"]["checks"]}
    assert sorted(checks) == ["control", "degeneracy", "floor"]
    assert all(c["passed"] in (True, False, None) for c in checks.values())
    assert any(s.startswith("constant CWE-") for s in checks["floor"]["systems"])
    assert "MiniLM nearest definition (no training)" in checks["control"]["systems"]
    # B trains on more tokens than A: budgets recorded, and the token-matched arm is a row
    b = rec["budgets"]
    assert b["matched"] is False
    assert b["arms"]["(B) template-grounded CoT SFT"] > 2 * b["arms"]["(A) plain SFT"]
    tm = b["arms"]["(A) plain SFT, token-matched to B"]
    assert 0.6 < tm / b["arms"]["(B) template-grounded CoT SFT"] < 1.5
    systems = [r["system"] for r in rec["rows"]]
    assert any(s.startswith("(A)") for s in systems) and any(s.startswith("(B)") for s in systems)
    assert any("MiniLM" in s for s in systems)
    lo, hi = rec["headline"]["spread"]
    assert lo <= rec["headline"]["value"] <= hi
    for f in ("accuracy.png", "confusion.png", "rejections.png"):
        assert (tmp_path / "cyberpal" / "tiny" / f).is_file() or any(
            p.name == f for p in tmp_path.rglob("*.png"))
    if rec["uninformative"]:  # the near-zero rule (both arms near zero OOD)
        assert rec["verdict"] == "uninformative" and "floor" in rec["uninformative"]
    # issue 38: the rank mode is the headline, measured on every seed
    assert rec["headline"]["name"].startswith("OOD CVE->CWE rank-mode top-1")
    assert (tmp_path / "cyberpal" / "tiny" / "rank.png").is_file() or any(
        p.name == "rank.png" for p in tmp_path.rglob("*.png"))
    assert any("rank mode on every seed" in n for n in rec["notes"])


def _ctx(scale, options):
    class Ctx:
        def pick(self, **kw):
            return kw[scale]

    c = Ctx()
    c.scale, c.options = scale, options
    return c


def test_small_defaults_are_the_issue_38_design():
    """Qwen2.5-Coder-0.5B + LoRA, 5 seeds, rank headline, generations on the first seed only;
    a gen headline needs generations on every seed."""
    import pytest

    from icml26.core.errors import UserError
    from icml26.cyberpal import claim

    S = claim._sizes(_ctx("small", {}))
    assert S["seeds"] == [0, 1, 2, 3, 4] and S["lora"] == 1 and S["gen_seeds"] == 1
    assert S["headline"] == "rank" and S["lr"] == 1e-3
    assert claim.DEFAULT_MODEL == "qwen2.5-coder-0.5b-instruct"
    assert claim._sizes(_ctx("tiny", {}))["gen_seeds"] == 1  # capped at the number of seeds
    with pytest.raises(UserError, match="headline=gen needs the generation evaluation"):
        claim._sizes(_ctx("small", {"headline": "gen"}))
    S = claim._sizes(_ctx("small", {"headline": "gen", "gen_seeds": "5"}))
    assert S["headline"] == "gen" and S["gen_seeds"] == 5


def test_rank_power_checks_and_degeneracy_use_rank_predictions():
    """The rank-mode power checks read the rank arrays and compare the arms' top-1 labels."""
    import numpy as np

    from icml26.cyberpal.report import ARM_NAMES, NN, power_checks

    A, B = ARM_NAMES["A"], ARM_NAMES["B"]
    correct = {A: np.array([[1, 0, 0, 0], [0, 1, 0, 0]]), B: np.array([[1, 1, 1, 0], [1, 1, 0, 1]]),
               NN: np.array([[1, 1, 1, 1]]), "const": np.array([[0, 0, 0, 0]])}
    results = {("A", 0): {"rank": {"pred": [1, 2, 3, 4]}, "texts": None},
               ("B", 0): {"rank": {"pred": [1, 2, 5, 6]}, "texts": None},
               ("A", 1): {"rank": {"pred": [1, 2, 3, 4]}, "texts": None},
               ("B", 1): {"rank": {"pred": [1, 2, 3, 4]}, "texts": None}}
    checks = {c.kind: c for c in power_checks(correct, results, ["A", "B"], [0, 1], "const", 0,
                                               metric="OOD rank-mode top-1 accuracy", mode="rank")}
    assert checks["degeneracy"].values == {"differing": 2.0, "total": 8.0}
    assert checks["floor"].values[B] == 0.75 and checks["floor"].values["const"] == 0.0
    assert checks["control"].values[NN] == 1.0
