import json
from collections import Counter

import numpy as np
import pytest
import torch
from scipy import stats

from icml26.core.lm import tiny_llama
from icml26.tie import lengthstudy as ls
from icml26.tie.experiment import RealPopulation, _r2_within, fit_labels_real, make_trace_real
from icml26.tie.lengths import LogT
from icml26.tie.sampling import prompt_key


def test_tail_stats_against_hand_computation():
    a = np.array([1, 2, 3, 4, 100])
    b = np.array([10, 10, 10, 20, 256])
    cb = np.array([0, 0, 0, 0, 1], bool)
    t = ls.tail_stats([a, b], [np.zeros(5, bool), cb], cap=256)
    pooled = np.concatenate([a, b]).astype(float)
    assert t["top10_share"] == pytest.approx(256 / pooled.sum())  # 10% of 10 completions = the single longest
    assert t["p99_p50"] == pytest.approx(np.quantile(pooled, 0.99) / np.quantile(pooled, 0.5))
    assert t["cap_hit"] == pytest.approx(0.1)
    assert t["skew"] == pytest.approx(np.mean([stats.skew(a, bias=False), stats.skew(b, bias=False)]))
    assert t["cv"] == pytest.approx(np.mean([a.std(ddof=1) / a.mean(), b.std(ddof=1) / b.mean()]))
    # prompts with a single distinct length carry no shape information and are skipped
    t2 = ls.tail_stats([a, np.array([2, 2, 2])], [np.zeros(5, bool), np.zeros(3, bool)], cap=256)
    assert t2["skew"] == pytest.approx(stats.skew(a, bias=False))


def test_heldout_loglik_prefers_the_true_family():
    rng = np.random.default_rng(0)
    heavy = [LogT(4.0, 0.6, 1.5).sample_lengths(rng, 300, 4096) for _ in range(6)]
    light = [LogT(4.0, 0.6, np.inf).sample_lengths(rng, 300, 4096) for _ in range(6)]
    h = ls.heldout_loglik([x[0] for x in heavy], [x[1] for x in heavy], n_fit=150)
    g = ls.heldout_loglik([x[0] for x in light], [x[1] for x in light], n_fit=150)
    assert h["diff"] > 0 and h["logt_wins"] >= 5 / 6 and h["n_prompts"] == 6
    assert g["diff"] < 0.005  # on log-normal data log-t (nu=3.5) cannot win by a margin
    assert h["logt"] == pytest.approx(h["lognormal"] + h["diff"])


def test_ks_study_separates_families_and_skips_untestable():
    rng = np.random.default_rng(1)
    heavy = [LogT(4.0, 0.8, 1.2).sample_lengths(rng, 120, 10**6) for _ in range(2)]
    L = [x[0] for x in heavy] + [np.array([5, 5, 5]), np.array([9, 9, 9])]
    C = [x[1] for x in heavy] + [np.zeros(3, bool), np.ones(3, bool)]
    out = ls.ks_study(L, C, cap=10**6, n_boot=19, seed=0)  # smallest p = 0.05: "pass" needs p > 0.05
    assert out["skipped"] == 2
    assert len(out["log-normal"]["p_values"]) == 2
    # nu = 1.2 tails are far heavier than a log-normal's: it is rejected more often than log-t free nu
    assert out["log-normal"]["pass_rate"] < out["log-t free nu"]["pass_rate"]
    assert all(1 / 20 <= p <= 1 for p in out["log-t free nu"]["p_values"])


def test_fit_labels_real_handles_unidentifiable_prompts():
    L = [np.array([2, 2, 2, 2]), np.array([48, 48, 48]), np.array([3, 7, 20, 48])]
    C = [np.zeros(4, bool), np.ones(3, bool), np.array([0, 0, 0, 1], bool)]
    lab = fit_labels_real(L, C)
    assert list(lab["nudged"]) == [True, True, False]
    assert np.all(np.isfinite(lab["mu"])) and np.all(lab["sigma"] > 0)
    assert lab["mu"][0] < np.log(4) < lab["mu"][1]  # the all-2 prompt is short, the all-capped one long
    assert lab["mean"][1] == 48


def test_r2_within_matches_hand_formula():
    y = np.array([1.0, 2.0, 3.0, 10.0, 12.0])
    yhat = np.array([1.5, 2.0, 2.5, 11.0, 11.0])
    fam = np.array(["a", "a", "a", "b", "b"])
    sst = (0.25 + 0 + 0.25) * 0 + ((1 - 2) ** 2 + 0 + (3 - 2) ** 2) + ((10 - 11) ** 2 + (12 - 11) ** 2)
    sse = 0.25 + 0 + 0.25 + 1 + 1
    assert _r2_within(y, yhat, fam) == pytest.approx(1 - sse / sst)


def test_real_trace_draws_only_heldout_lengths():
    pop = RealPopulation(np.array(["x", "y"]), np.zeros((2, 3), np.float32), [np.array([1, 2])] * 2,
                         [np.zeros(2, bool)] * 2, [np.array([7, 9]), np.array([300])],
                         np.array([11, 22]), cap=256)
    tr = make_trace_real(pop, 400, rate=10.0, seed=0)
    for r in tr:
        i = r.meta["prompt"]
        assert r.output_tokens in ({7, 9} if i == 0 else {256})  # 300 is clipped to the engine's cap
        assert r.prompt_tokens == (11, 22)[i]
    arr = np.array([r.arrival_s for r in tr])
    assert np.all(np.diff(arr) >= 0) and 400 / arr[-1] == pytest.approx(10.0, rel=0.2)


def test_collect_caches_resumes_and_extends(tmp_path, monkeypatch):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, tok = tiny_llama(hidden=32, layers=1, heads=2, seed=0)
        cfg = ls.StudyConfig(n_prompts=12, n_samples=2, ks_prompts=2, ks_samples=3, cap=6, batch_size=16)
        a = ls.collect(cfg, model, tok, root=tmp_path)
        path = ls.cache_path(cfg, tmp_path)
        assert path.exists() and "cap6" in path.name and "T1" in path.name
        assert [len(x) for x in a["lengths"]] == [3, 3] + [2] * 10
        assert all((x >= 1).all() and (x <= 6).all() for x in a["lengths"])
        assert all(((x == 6) | ~c).all() for x, c in zip(a["lengths"], a["censored"], strict=True))
        assert len(set(a["family"])) == 6

        def boom(*args, **kw):
            raise AssertionError("sampled although everything was cached")

        monkeypatch.setattr(ls, "sample_lengths", boom)
        b = ls.collect(cfg, model, tok, root=tmp_path)  # a re-run reads the cache only
        assert all(np.array_equal(x, y) for x, y in zip(a["lengths"], b["lengths"], strict=True))
        monkeypatch.undo()
        bigger = ls.StudyConfig(n_prompts=12, n_samples=4, ks_prompts=0, cap=6, batch_size=16)
        before = json.loads(path.read_text())
        c = ls.collect(bigger, model, tok, root=tmp_path)  # extends: old samples stay, new appended
        after = json.loads(path.read_text())
        for i in range(12):
            k = prompt_key(a["prompt"][i])
            old = before[k]["lengths"]
            assert after[k]["lengths"][: len(old)] == old and len(after[k]["lengths"]) >= 4
            # returned samples are a sub-multiset of the cached completions
            assert not (Counter(c["lengths"][i].tolist()) - Counter(after[k]["lengths"]))
        assert ls.cached_counts(bigger, tmp_path) == (12, 0)
        other = ls.StudyConfig(n_prompts=12, n_samples=2, ks_prompts=0, cap=7)
        assert ls.cache_path(other, tmp_path) != path  # settings are part of the key
        assert prompt_key(a["prompt"][0]) in json.loads(path.read_text())
    finally:
        torch.set_num_threads(threads)


def test_study_config_rejects_bad_sizes():
    with pytest.raises(ValueError, match="n_prompts"):
        ls.StudyConfig(n_prompts=6)
    with pytest.raises(ValueError, match="ks_prompts"):
        ls.StudyConfig(n_prompts=12, ks_prompts=13)
    with pytest.raises(ValueError, match=">= 2 samples"):
        ls.StudyConfig(n_samples=1)


def test_packaged_tiny_fixture_is_real_smollm2_data():
    from icml26.core.claims import RunContext
    from icml26.tie.realclaim import study_config

    cfg = study_config(RunContext(scale="tiny"))
    pk = ls._packaged(ls.cache_path(cfg).name)
    keys = {prompt_key(p) for _, p in ls.study_prompts(cfg)}
    assert keys <= set(pk), "tiny fixture must cover every tiny prompt"
    for k in keys:
        L, c = np.array(pk[k]["lengths"]), np.array(pk[k]["censored"])
        assert L.size >= cfg.n_samples and (L >= 1).all() and L.max() <= cfg.cap
        assert (L[c] == cfg.cap).all()
