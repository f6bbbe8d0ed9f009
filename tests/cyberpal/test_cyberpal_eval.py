"""Evaluation: answer parsing, rank mode against brute force, hierarchy credit, MCQ, splits."""

import numpy as np
import pytest
import torch

from icml26.cyberpal.catalog import Pair, cve_cwe_pairs, load_attack, load_cwe
from icml26.cyberpal.enrich import decontaminate
from icml26.cyberpal.evaluate import build_mcq, parse_cwe, rank_labels, score_cwe
from icml26.cyberpal.splits import SplitConfig, check_disjoint, make_splits, top_cwes

CWE = load_cwe()


def test_parse_takes_the_last_id():
    assert parse_cwe("Category: CWE-74: X\nAnswer: CWE-79: Y") == 79
    assert parse_cwe("cwe_89 then cwe 22") == 22
    assert parse_cwe("no id") is None


def test_rank_matches_brute_force():
    from icml26.core.lm import tiny_llama
    from icml26.cyberpal.train import render_chat

    model, tok = tiny_llama(hidden=32, layers=2, heads=2, vocab="bytes", seed=1)
    model = model.double()
    chats = [[{"role": "user", "content": "buffer overflow in parser"}],
             [{"role": "system", "content": "S"}, {"role": "user", "content": "xss"}]]
    labels = ["CWE-79: a", "CWE-787: longer label here", "CWE-20: b"]
    got = rank_labels(model, tok, chats, labels, batch_size=2)
    for i, c in enumerate(chats):
        p = render_chat(tok, c, add_generation_prompt=True)
        for j, lab in enumerate(labels):
            full = render_chat(tok, c + [{"role": "assistant", "content": lab}])
            with torch.no_grad():
                logp = torch.log_softmax(model(input_ids=torch.tensor([full])).logits[0], -1)
            ref = sum(float(logp[t - 1, full[t]]) for t in range(len(p), len(full)))
            assert got[i, j] == pytest.approx(ref, rel=1e-9)


def test_hierarchy_and_strict_scores():
    s = score_cwe([79, 74, 89, None], [[79], [79], [79, 20], [79]], CWE)
    assert s.any_gold.tolist() == [True, False, False, False]
    assert s.hierarchy.tolist() == [1.0, 0.5, 0.0, 0.0]  # 74 is 79's view-1000 parent
    assert s.summary()["strict"] == pytest.approx(1 / 3)


def test_mcq_distractors_never_true():
    att = load_attack()
    for hard in (True, False):
        items = build_mcq(CWE, att, 20, 20, hard=hard, seed=0)
        assert len(items) == 40 and all(len(set(i.choices)) == 4 for i in items)
        for it in items:
            right = it.choices[it.answer]
            wrong = [c for k, c in enumerate(it.choices) if k != it.answer]
            if it.task == "attack_tactic":
                tid = it.id.removeprefix("att-tac-")
                assert right in att[tid].tactics and not set(wrong) & set(att[tid].tactics)
            if it.task == "cwe_id2name":
                assert right == CWE[int(it.id.rsplit("-", 1)[1])].name


def test_splits_are_disjoint_by_cve():
    pairs = cve_cwe_pairs(CWE)
    sp = make_splits(pairs, SplitConfig(n_cwes=50, n_id_test=150))
    assert len(sp.labels) == 50 and len(sp.id_test) == 150
    ids = [p.cve_id for p in sp.train + sp.id_test + sp.ood_test]
    assert len(ids) == len(set(ids))
    assert all(p.year <= 2012 for p in sp.train + sp.id_test)
    assert all(p.year >= 2017 for p in sp.ood_test)
    bad = sp.__class__(sp.labels, sp.train, sp.id_test + sp.train[:1], sp.ood_test)
    with pytest.raises(ValueError, match="in both train and id_test"):
        check_disjoint(bad)
    assert top_cwes([Pair("CVE-2000-1", "x", (5, 3)), Pair("CVE-2000-2", "y", (5,))], 2) == (5, 3)


def test_decontamination_catches_ids_and_near_duplicates():
    # one-hot per normalised text: identical text -> cosine 1, different text -> cosine 0
    # (an explicit vocabulary, not Python's salted hash(), which collides in ~1 run of 97)
    vocab = {}

    def fake_embed(texts):
        keys = [t.lower().strip(" .") for t in texts]
        for k in keys:
            vocab.setdefault(k, len(vocab))
        v = np.zeros((len(keys), 16), dtype=np.float32)
        v[np.arange(len(keys)), [vocab[k] for k in keys]] = 1.0
        return v

    recs = [{"messages": [{}, {"content": t}], "meta": {"id": i}} for i, t in
            [("CVE-1", "sql injection in login"), ("CVE-2", "XSS in search."),
             ("CVE-3", "path traversal")]]
    kept, counts = decontaminate(recs, ["CVE-1"], ["xss in search"], embed=fake_embed)
    assert [r["meta"]["id"] for r in kept] == ["CVE-3"]
    assert counts == {"by_id": 1, "near_duplicate": 1}


@pytest.mark.parametrize("labels", [
    ["CWE-79: a", "CWE-787: longer label here", "CWE-20: b"],  # common leading "CWE-"
    ["x", "CWE-1: y", "zz top"],  # nothing in common beyond the prompt
    ["CWE-7", "CWE-79: z"],  # one label is a prefix of another
])
def test_rank_prefix_cache_equals_full_path_float64(labels):
    from icml26.core.lm import tiny_llama

    model, tok = tiny_llama(hidden=32, layers=2, heads=2, vocab="bytes", seed=3)
    model = model.double()
    chats = [[{"role": "system", "content": "You map CVEs."},
              {"role": "user", "content": "SQL injection in login.php via the id parameter"}],
             [{"role": "user", "content": "xss"}]]
    full = rank_labels(model, tok, chats, labels, batch_size=2, prefix_cache=False)
    cached = rank_labels(model, tok, chats, labels, batch_size=2, prefix_cache=True)
    np.testing.assert_allclose(cached, full, rtol=1e-10, atol=1e-10)
    assert np.all(full < 0) and np.ptp(full[0]) > 0  # real, distinct scores
