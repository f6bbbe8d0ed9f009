import numpy as np
import pytest

from icml26.cclrec.data import load_interactions, split
from icml26.core.errors import UserError


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_inter_file_typed_header_and_duplicates(tmp_path):
    p = _write(
        tmp_path / "d.inter",
        "user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
        "a\tx\t5\t3\na\ty\t1\t1\nb\tx\t4\t2\na\tx\t2\t9\n",
    )
    d = load_interactions(p)
    assert (d.n_users, d.n_items, len(d), d.n_duplicates) == (2, 2, 3, 1)
    assert d.user_ids == ("a", "b") and d.item_ids == ("x", "y")
    d2 = load_interactions(p, min_rating=3)
    assert len(d2) == 2 and d2.n_below_rating == 2  # (a, y, 1) and (a, x, 2)


def test_csv_without_timestamps(tmp_path):
    p = _write(tmp_path / "d.csv", "user,item\n1,10\n1,11\n1,12\n2,10\n")
    d = load_interactions(p)
    assert d.timestamps is None and len(d) == 4
    with pytest.raises(UserError, match="timestamp.*random"):
        split(d, "user_time")
    s = split(d, "random", seed=0)
    assert s.n_dropped_users == 1  # user 2 has one interaction


def test_missing_column(tmp_path):
    p = _write(tmp_path / "d.csv", "uid_x,item\n1,2\n")
    with pytest.raises(UserError, match="no user column"):
        load_interactions(p)
    with pytest.raises(UserError, match="no such file"):
        load_interactions(tmp_path / "nope.inter")


def test_user_time_split_is_chronological_and_disjoint(tmp_path):
    rng = np.random.default_rng(0)
    lines = ["user_id:token\titem_id:token\ttimestamp:float"]
    for u in range(20):
        for i in rng.choice(50, 15, replace=False):
            lines.append(f"{u}\t{i}\t{rng.random()}")
    d = load_interactions(_write(tmp_path / "d.inter", "\n".join(lines) + "\n"))
    s = split(d, "user_time", (0.8, 0.1, 0.1))
    tr, va, te = (m.toarray() > 0 for m in (s.train, s.val, s.test))
    assert not (tr & va).any() and not (tr & te).any() and not (va & te).any()
    assert (tr | va | te).sum() == len(d)
    ts = {(int(d.users[k]), int(d.items[k])): d.timestamps[k] for k in range(len(d))}
    for u in range(d.n_users):
        t_tr = [ts[(u, i)] for i in np.flatnonzero(tr[u])]
        t_te = [ts[(u, i)] for i in np.flatnonzero(te[u])]
        t_va = [ts[(u, i)] for i in np.flatnonzero(va[u])]
        assert max(t_tr) < min(t_va) <= max(t_va) < min(t_te)
        assert te[u].sum() == 2 and va[u].sum() == 2  # round(15 * 0.1)


def test_bad_ratios(tmp_path):
    p = _write(tmp_path / "d.csv", "user,item\n1,10\n1,11\n1,12\n")
    with pytest.raises(UserError, match="ratios"):
        split(load_interactions(p), "random", (0.5, 0.1, 0.1))
    with pytest.raises(UserError, match="split mode"):
        split(load_interactions(p), "bogus")
