"""The real-sample population pipeline at a tiny size (a tiny random Llama, no model zoo)."""

import json

import numpy as np
import pytest
import torch

from icml26.core.lm import tiny_llama
from icml26.tie.prompts import POPULATION_FAMILIES, population_prompts
from icml26.tie.sampling import prompt_key, sample_population


@pytest.fixture(scope="module")
def lm():
    torch.manual_seed(0)
    return tiny_llama(hidden=32, layers=1, heads=2, seed=0)


def test_population_prompts_cover_the_corpora():
    ps = population_prompts(70, seed=0)
    fams = [f for f, _ in ps]
    assert set(fams) == set(POPULATION_FAMILIES) and len({p for _, p in ps}) == 70
    shakes = [p for f, p in ps if f == "shakespeare"]
    assert all(p.count("\n") >= 4 for p in shakes)  # a passage of >= 4 lines
    assert population_prompts(70, seed=0) == ps


def test_sample_population_caches_and_resumes_to_the_same_draws(lm, tmp_path, monkeypatch):
    model, tok = lm
    prompts = [p for _, p in population_prompts(12, seed=0)][:5]
    path = tmp_path / "c.json"
    got = sample_population(model, tok, prompts, 3, cap=8, temperature=0.7, seed=0, batch_size=4, cache_path=path)
    for p in prompts:
        L, c = np.array(got[p]["lengths"]), np.array(got[p]["censored"])
        assert L.size == 3 and np.all((L >= 1) & (L <= 8)) and np.array_equal(c, L == 8) | (~c).all()
        assert np.all(L[c] == 8)
        assert got[p]["prompt_tokens"] > 0
    cache = json.loads(path.read_text())
    assert sorted(cache[prompt_key(prompts[0])]["draw"]) == [0, 1, 2]

    calls = []
    import icml26.core.generate as g

    orig = g.generate

    def counting_generate(*a, **k):
        calls.append(len(a[2]))
        return orig(*a, **k)

    monkeypatch.setattr(g, "generate", counting_generate)
    again = sample_population(model, tok, prompts, 3, cap=8, seed=0, batch_size=4, cache_path=path)
    assert calls == [] and again == got  # nothing left to draw
    more = sample_population(model, tok, prompts, 4, cap=8, seed=0, batch_size=4, cache_path=path)
    assert calls == [5]  # only draw 3 of each prompt
    monkeypatch.undo()
    fresh = sample_population(model, tok, prompts, 4, cap=8, seed=0, batch_size=3, cache_path=tmp_path / "f.json")
    for p in prompts:  # draw j has its own seed: incremental == uninterrupted
        assert more[p]["lengths"][:3] == got[p]["lengths"]
        assert fresh[p]["lengths"] == more[p]["lengths"]


def test_population_claim_runs_at_tiny(lm, tmp_path, monkeypatch):
    """The whole --opt lengths=population path on a tiny model: sampling, labels, predictor,
    schedule study with every oracle arm, power checks, preemption and Spearman rows."""
    from icml26.claims_index import get
    from icml26.core.claims import Claim, run_claim
    from icml26.tie import lengthstudy
    from icml26.tie.claim import run

    model, tok = lm
    monkeypatch.setattr(lengthstudy, "default_root", lambda: tmp_path / "cache")
    import icml26.core.lm as core_lm

    monkeypatch.setattr(core_lm, "load_lm", lambda *a, **k: (model, tok))
    rec = run_claim(Claim("tie", "p", "s", "f", run=run, power=get("tie").power), scale="tiny", out_root=tmp_path,
                    options={"lengths": "population", "prompts": "14", "samples": "4", "cap": "24",
                             "requests": "700", "seeds": "2", "device": "cpu", "dtype": "fp32"})
    assert rec["error"] is None, rec["error"]
    assert rec["verdict"] in ("reproduced", "not reproduced", "inconclusive", "uninformative")
    assert list((tmp_path / "cache").glob("population-*-fp32-T0.7-cap24-seed0.json"))
    parts = {}
    for r in rec["rows"]:
        parts.setdefault(r["part"], []).append(r)
    assert {"population", "scheduling", "power", "preemption", "predictor", "score vs predictor"} <= set(parts)
    systems = {r["system"] for r in parts["scheduling"]}
    assert {"oracle SJF", "oracle median", "oracle index", "oracle TIE"} <= systems
    assert any("Spearman" in r["quantity"] for r in parts["predictor"])
    controls = {c["systems"][0] for c in rec["power"]["checks"] if c["kind"] == "control"}
    assert controls == {"oracle median", "oracle index"}
