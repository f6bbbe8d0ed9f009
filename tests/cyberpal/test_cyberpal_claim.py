"""The cyberpal claim at tiny scale, end to end (tiny_llama, 10 CWEs, 40 SFT steps per arm)."""

from icml26.core.claims import Claim, run_claim


def test_tiny_claim_runs(tmp_path):
    from icml26.cyberpal.claim import run

    rec = run_claim(Claim("cyberpal", "p", "s", "f", run=run), scale="tiny", out_root=tmp_path,
                    threads=1)
    assert rec["error"] is None, rec["error"]
    assert rec["verdict"] in ("reproduced", "not reproduced", "inconclusive")
    systems = [r["system"] for r in rec["rows"]]
    assert any(s.startswith("(A)") for s in systems) and any(s.startswith("(B)") for s in systems)
    assert any("MiniLM" in s for s in systems)
    lo, hi = rec["headline"]["spread"]
    assert lo <= rec["headline"]["value"] <= hi
    for f in ("accuracy.png", "confusion.png", "rejections.png"):
        assert (tmp_path / "cyberpal" / "tiny" / f).is_file() or any(
            p.name == f for p in tmp_path.rglob("*.png"))
    if rec["uninformative"]:  # the floor rule (both arms near zero OOD) forces inconclusive
        assert rec["verdict"] == "inconclusive" and "floor" in rec["uninformative"]
