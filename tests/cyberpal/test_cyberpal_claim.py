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
