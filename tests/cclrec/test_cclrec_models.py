import numpy as np
import pytest
import scipy.sparse as sp
import torch

from icml26.cclrec import SGL, CCLRec, LightGCN, MostPop, RLMRecCon, SimGCL, load
from icml26.core.errors import UserError


def _data(seed=0, n_u=40, n_i=30):
    rng = np.random.default_rng(seed)
    topic_i = np.arange(n_i) % 3
    topic_u = np.arange(n_u) % 3
    p = np.where(topic_u[:, None] == topic_i[None, :], 0.5, 0.05)
    R = (rng.random((n_u, n_i)) < p).astype(np.float32)
    R[:, 0] = 1
    sem = (np.eye(3)[topic_i] + 0.1 * rng.normal(size=(n_i, 3))).astype(np.float32)
    return sp.csr_matrix(R), sem


@pytest.mark.parametrize("cls", [MostPop, LightGCN, SGL, SimGCL, RLMRecCon, CCLRec])
def test_fit_recommend_save_load_roundtrip(cls, tmp_path):
    train, sem = _data()
    m = cls(dim=8, max_passes=2, batch_size=64, seed=0).fit(train, sem)
    users = np.arange(10)
    recs = m.recommend(users, k=5)
    assert recs.shape == (10, 5)
    R = train.toarray() > 0
    assert not any(R[u, recs[j]].any() for j, u in enumerate(users))  # train items never returned
    path = m.save(tmp_path / "m")
    back = load(path)
    torch.testing.assert_close(back.score(users), m.score(users))
    assert np.array_equal(back.recommend(users, k=5), recs)


def test_graph_uses_train_edges_only():
    train, sem = _data()
    m = LightGCN(dim=4, max_passes=1, seed=0).fit(train, sem)
    dense = m._ui.a.to_dense().numpy() > 0
    assert np.array_equal(dense, train.toarray() > 0)


def test_seed_determinism():
    train, sem = _data()
    a = CCLRec(dim=8, max_passes=1, batch_size=32, seed=3).fit(train, sem)
    b = CCLRec(dim=8, max_passes=1, batch_size=32, seed=3).fit(train, sem)
    torch.testing.assert_close(a.score([0, 1]), b.score([0, 1]))


def test_cclrec_learns_planted_topics():
    train, sem = _data(1, 60, 30)
    m = CCLRec(dim=16, max_passes=8, batch_size=64, seed=0, lr=3e-3).fit(train, sem)
    rec = m.recommend(np.arange(60), k=3)
    topic_i = np.arange(30) % 3
    assert (topic_i[rec] == (np.arange(60) % 3)[:, None]).mean() > 0.6


def test_bad_inputs(tmp_path):
    train, sem = _data()
    with pytest.raises(UserError, match="one row per item"):
        CCLRec(max_passes=1).fit(train, sem[:-1])
    bad = sem.copy()
    bad[0, 0] = np.nan
    with pytest.raises(UserError, match="NaN"):
        LightGCN(max_passes=1).fit(train, bad)
    with pytest.raises(UserError, match="empty"):
        LightGCN(max_passes=1).fit(sp.csr_matrix(train.shape, dtype=np.float32))
    with pytest.raises(ValueError, match="cl_space"):
        CCLRec(cl_space="nope")
    with pytest.raises(ValueError, match="lr"):
        LightGCN(lr=0)
    m = MostPop().fit(train)
    with pytest.raises(UserError, match="unknown users"):
        m.recommend([0, 999, 1000])
    with pytest.raises(UserError, match="k must be"):
        m.recommend([0], k=10_000)
    with pytest.raises(UserError, match="not a saved"):
        load(tmp_path)
