import math

import numpy as np
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.cclrec.metrics import evaluate


def _brute(scores, train, target, k):
    rec, nd = [], []
    for u in range(scores.shape[0]):
        t = set(np.flatnonzero(target[u]))
        if not t:
            continue
        cand = [i for i in range(scores.shape[1]) if not train[u, i]]
        ranked = sorted(cand, key=lambda i: (-scores[u, i], i))[:k]
        hits = [1 if i in t else 0 for i in ranked]
        rec.append(sum(hits) / len(t))
        dcg = sum(h / math.log2(r + 2) for r, h in enumerate(hits))
        idcg = sum(1 / math.log2(r + 2) for r in range(min(len(t), k)))
        nd.append(dcg / idcg)
    return np.mean(rec), np.mean(nd)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 12))
def test_metrics_match_brute_force(seed, k):
    rng = np.random.default_rng(seed)
    n_u, n_i = 6, 20
    scores = rng.permutation(n_u * n_i).reshape(n_u, n_i).astype(np.float32)  # no ties
    train = rng.random((n_u, n_i)) < 0.2
    target = (rng.random((n_u, n_i)) < 0.5) & ~train  # |T| often > k
    res = evaluate(
        lambda u: torch.from_numpy(scores[u]),
        sp.csr_matrix(target.astype(np.float32)),
        [sp.csr_matrix(train.astype(np.float32))],
        ks=(k,),
    )
    r, n = _brute(scores, train, target, k)
    assert abs(res[f"recall@{k}"] - r) < 1e-9 and abs(res[f"ndcg@{k}"] - n) < 1e-9


def test_perfect_ranking_has_ndcg_one_and_train_items_are_masked():
    scores = np.array([[9.0, 8.0, 7.0, 1.0, 0.0]], np.float32)
    train = sp.csr_matrix(np.array([[1, 0, 0, 0, 0]], np.float32))
    target = sp.csr_matrix(np.array([[0, 1, 1, 0, 0]], np.float32))
    res = evaluate(lambda u: torch.from_numpy(scores[u]), target, [train], ks=(2,))
    assert res["ndcg@2"] == 1.0 and res["recall@2"] == 1.0
