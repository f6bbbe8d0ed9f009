import itertools
import json
import math

import numpy as np
import pytest
import torch

from icml26.core.claims import Claim, run_claim
from icml26.tie.predictor import HeadConfig, LengthPredictor, LTRRanker, SSJFPredictor, listmle_loss


def test_listmle_matches_brute_force_plackett_luce():
    s = torch.tensor([0.3, -1.2, 2.0, 0.5], dtype=torch.float64)
    y = torch.tensor([3.0, 1.0, 9.0, 4.0])
    order = torch.argsort(y).tolist()  # ascending length: served first = lowest score
    w = torch.exp(-s)
    p, rest = 1.0, list(order)
    for i in order:
        p *= float(w[i] / w[rest].sum())
        rest.remove(i)
    assert float(listmle_loss(s, y)) == pytest.approx(-math.log(p), rel=1e-10)
    # the loss is minimised by the permutation consistent with the targets
    perms = [torch.tensor(q, dtype=torch.float64) for q in itertools.permutations([0.0, 1.0, 2.0, 3.0])]
    best = min(perms, key=lambda q: float(listmle_loss(q, y)))
    assert torch.equal(torch.argsort(best), torch.argsort(y))


def _data(n=240, d=8, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    mu = 4 + x[:, 0] + 0.5 * x[:, 1]
    sigma = np.exp(-0.5 + 0.3 * x[:, 2])
    return x, mu, sigma


def test_length_predictor_learns_and_round_trips(tmp_path):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _check_predictors(tmp_path)
    finally:
        torch.set_num_threads(threads)


def _check_predictors(tmp_path):
    x, mu, sigma = _data()
    cfg = HeadConfig(epochs=60, lr=3e-3, seed=0)
    lp = LengthPredictor(cfg).fit(x[:200], mu[:200], sigma[:200])
    pm, ps = lp.predict(x[200:])
    r2 = 1 - ((pm - mu[200:]) ** 2).sum() / ((mu[200:] - mu[200:].mean()) ** 2).sum()
    assert r2 > 0.6 and (ps > 0).all()
    lp.save(tmp_path / "p.safetensors")
    back = LengthPredictor.load(tmp_path / "p.safetensors")
    np.testing.assert_allclose(back.predict(x[200:])[0], pm, rtol=1e-6)
    with pytest.raises(ValueError, match="another encoder"):
        lp.predict(x[:, :4])
    ssjf = SSJFPredictor(cfg).fit(x[:200], np.exp(mu[:200]))
    assert np.corrcoef(np.log(ssjf.predict(x[200:])), mu[200:])[0, 1] > 0.7
    ltr = LTRRanker(cfg).fit(x[:200], np.exp(mu[:200]))
    assert np.corrcoef(ltr.predict(x[200:]), mu[200:])[0, 1] > 0.7
    with pytest.raises(RuntimeError, match="not fitted"):
        SSJFPredictor().predict(x)


def test_tiny_claim(tmp_path, monkeypatch):
    """The SmolLM2 length-study mode at tiny, from the packaged real samples: no sampling."""
    from icml26.tie import lengthstudy
    from icml26.tie.claim import run

    monkeypatch.setattr(lengthstudy, "default_root", lambda: tmp_path / "cache")  # cold cache: the fixture must suffice
    monkeypatch.setattr(lengthstudy, "sample_lengths", _no_sampling)
    from icml26.claims_index import get

    rec = run_claim(Claim("tie", "p", "s", "f", run=run, power=get("tie").power), scale="tiny",
                    out_root=tmp_path, options={"lengths": "smollm2", "requests": "700"})
    assert rec["error"] is None, rec["error"]
    assert rec["verdict"] in ("reproduced", "not reproduced", "inconclusive", "uninformative")
    checks = rec["power"]["checks"]
    assert sorted(c["kind"] for c in checks) == ["control", "control", "degeneracy", "floor"]
    assert set(rec["power"]["declared"]) == {"control", "floor", "degeneracy"}
    assert all(c["passed"] in (True, False, None) for c in checks)
    assert {c["systems"][0] for c in checks if c["kind"] == "control"} == {"oracle median", "oracle index"}
    assert rec["power"]["passed"] == all(c["passed"] is True for c in checks)
    assert (rec["verdict"] == "uninformative") == (not rec["power"]["passed"])
    deg = next(c for c in checks if c["kind"] == "degeneracy")
    assert 0 <= deg["values"]["differing"] <= deg["values"]["total"] == 12 * 11 / 2
    parts = {}
    for r in rec["rows"]:
        parts.setdefault(r["part"], []).append(r)
    assert set(parts) == {"tail", "KS", "held-out log-lik", "predictor", "scheduling", "power",
                          "score vs predictor", "preemption"}
    ptla = {r["quantity"].split(":")[0]: r["measured"] for r in parts["scheduling"]}
    assert set(ptla) == {"FCFS", "SSJF", "LTR", "SEPT", "TIE-lognormal", "TIE", "oracle SJF",
                         "oracle median", "oracle index", "oracle TIE"}
    assert all(v > 0 for v in ptla.values())
    assert ptla["oracle SJF"] <= ptla["FCFS"] * 1.001
    tail = {r["quantity"]: r["measured"] for r in parts["tail"]}
    assert 0 < tail["top-10% token share"] < 1 and 0 <= tail["cap-hit rate"] <= 1
    assert all(0 <= r["measured"] <= 1 for r in parts["KS"])
    lo, hi = rec["headline"]["spread"]
    assert lo <= rec["headline"]["value"] <= hi
    assert len(rec["figures"]) == 4 and all((tmp_path / f).exists() for f in rec["figures"])
    json.dumps(rec)


def test_tiny_default_is_the_proxy_with_every_oracle_arm(tmp_path):
    """tiny's default mode (proxy): every oracle arm in the record with its power fields, the
    preemption counts of the KV-limited engine and the predictor's Spearman rho."""
    from icml26.claims_index import get
    from icml26.tie.claim import run

    rec = run_claim(Claim("tie", "p", "s", "f", run=run, power=get("tie").power), scale="tiny", out_root=tmp_path)
    assert rec["error"] is None, rec["error"]
    assert rec["options"] == {} and "PROXY" in rec["notes"][0]
    checks = rec["power"]["checks"]
    controls = {c["systems"][0]: c for c in checks if c["kind"] == "control"}
    assert set(controls) == {"oracle median", "oracle index"}
    for c in controls.values():  # the measured numbers behind each check are kept
        assert c["systems"][1] == "LTR" and c["passed"] in (True, False)
        assert set(c["values"]) >= {c["systems"][0], "LTR"} and c["spreads"][c["systems"][0]] is not None
    assert (rec["verdict"] == "uninformative") == (not all(c["passed"] for c in checks))
    sched = {r["system"]: r for r in rec["rows"] if r["part"] == "scheduling"}
    assert {"oracle SJF", "oracle median", "oracle index", "oracle TIE", "TIE", "LTR", "FCFS"} <= set(sched)
    ratios = {r["system"]: r for r in rec["rows"] if r["part"] == "power" and r["quantity"].startswith("PTLA")}
    assert {"oracle SJF", "oracle median", "oracle index", "oracle TIE", "TIE"} <= set(ratios)
    pre = [r for r in rec["rows"] if r["part"] == "preemption" and r["system"] == "FCFS"]
    assert pre and all(r["measured"] > 0 for r in pre)  # KV pressure: the engine preempts
    rho = {r["quantity"]: r["measured"] for r in rec["rows"] if "Spearman" in r.get("quantity", "")}
    assert len(rho) == 4 and all(-1 <= v <= 1 for v in rho.values())
    assert rec["headline"]["name"].endswith("load 2.0")
    assert (tmp_path / "tie" / "details.json").exists() or list(tmp_path.rglob("details.json"))


def _no_sampling(*a, **k):
    raise AssertionError("the tiny claim must not sample (packaged SmolLM2 fixture)")


def test_proxy_option_rejects_unknown_mode(tmp_path):
    from icml26.tie.claim import run

    rec = run_claim(Claim("tie", "p", "s", "f", run=run), scale="tiny", out_root=tmp_path,
                    options={"lengths": "bogus"})
    assert "lengths must be proxy, population or smollm2" in rec["error"]["message"]
