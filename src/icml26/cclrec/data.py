"""Interaction files, item tables and leak-free train/validation/test splits.

Reads RecBole atomic files (``.inter``/``.item``/``.user``: tab-separated, typed headers such as
``user_id:token item_id:token rating:float timestamp:float``) and CSV files (``user,item[,rating,
timestamp]``). Raw ids are mapped to dense indices ``0..n-1`` in order of first appearance. A
:class:`Split` holds three ``scipy.sparse.csr_matrix`` of shape ``(n_users, n_items)`` (float32,
ones); graphs and co-occurrence counts are built from ``train`` only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from icml26.core.errors import UserError

__all__ = ["Interactions", "Split", "load_interactions", "load_table", "split", "ml100k_dir"]

SPLIT_MODES = ("user_time", "global_time", "random")


@dataclass(frozen=True)
class Interactions:
    """Implicit feedback: one row per (user, item) pair, duplicates dropped.

    ``users``/``items``: (n,) int64 dense indices; ``ratings``/``timestamps``: (n,) float64 or
    None; ``user_ids``/``item_ids``: raw ids by dense index.
    """

    users: np.ndarray
    items: np.ndarray
    ratings: np.ndarray | None
    timestamps: np.ndarray | None
    user_ids: tuple[str, ...]
    item_ids: tuple[str, ...]
    n_duplicates: int = 0
    n_below_rating: int = 0

    @property
    def n_users(self) -> int:
        return len(self.user_ids)

    @property
    def n_items(self) -> int:
        return len(self.item_ids)

    def __len__(self) -> int:
        return int(self.users.size)

    def matrix(self) -> sp.csr_matrix:
        return _csr(self.users, self.items, (self.n_users, self.n_items))


@dataclass(frozen=True)
class Split:
    """Train/validation/test interaction matrices, (n_users, n_items) float32 CSR of ones."""

    train: sp.csr_matrix
    val: sp.csr_matrix
    test: sp.csr_matrix
    user_ids: tuple[str, ...]
    item_ids: tuple[str, ...]
    n_dropped_users: int = 0
    mode: str = "user_time"
    info: dict = field(default_factory=dict)

    @property
    def n_users(self) -> int:
        return self.train.shape[0]

    @property
    def n_items(self) -> int:
        return self.train.shape[1]


def _csr(users: np.ndarray, items: np.ndarray, shape: tuple[int, int]) -> sp.csr_matrix:
    m = sp.csr_matrix(
        (np.ones(len(users), dtype=np.float32), (users, items)), shape=shape, dtype=np.float32
    )
    m.sum_duplicates()
    m.data[:] = 1.0
    m.sort_indices()
    return m


def ml100k_dir() -> Path:
    """Folder of MovieLens-100K in the ``recbole`` wheel (read as files, never imported)."""
    from icml26.core.lm import package_dir

    path = package_dir("recbole", "recbole==1.2.1") / "dataset_example" / "ml-100k"
    if not (path / "ml-100k.inter").is_file():
        raise UserError(f"{path}/ml-100k.inter is missing; reinstall `recbole==1.2.1 --no-deps`")
    return path


def load_table(path: str | os.PathLike) -> tuple[list[str], list[list[str]]]:
    """Read an atomic file (tab-separated, typed header) or a CSV with a header row.

    Returns the header names without their ``:type`` suffix, and the rows as strings (a header
    with no rows gives no rows). Read by :func:`icml26.core.tables.read_table`: a byte-order mark,
    the delimiter, duplicate columns and ragged rows are handled there, with errors naming file,
    row and column.
    """
    t = _read(path, allow_empty=True)
    return t.columns, [[r[c] for c in t.columns] for r in t.rows]


def _read(path: str | os.PathLike, allow_empty: bool = False, what: str = "rows"):
    from icml26.core.tables import read_table

    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    return read_table(path, typed_header=True, strip=False, encoding_errors="replace",
                      allow_empty=allow_empty, what=what)


_ALIASES = {
    "user": ("user_id", "user", "userid", "uid"),
    "item": ("item_id", "item", "itemid", "iid", "movie_id"),
    "rating": ("rating", "score"),
    "timestamp": ("timestamp", "time", "ts"),
}


def _column(header: list[str], role: str, path: Path, required: bool) -> int | None:
    lower = [h.lower() for h in header]
    for name in _ALIASES[role]:
        if name in lower:
            return lower.index(name)
    if required:
        raise UserError(
            f"{path}: no {role} column; header is {header}, expected one of {list(_ALIASES[role])}"
            " (atomic files: `user_id:token item_id:token ...`)"
        )
    return None


def load_interactions(path: str | os.PathLike, min_rating: float | None = None) -> Interactions:
    """Load an ``.inter`` atomic file or a CSV ``user,item[,rating,timestamp]``.

    Rows with ``rating < min_rating`` are dropped (counted); repeated (user, item) pairs keep the
    first occurrence (counted in ``n_duplicates``).
    """
    path = Path(path)
    t = _read(path, what="interactions")
    header = t.columns
    cu = _column(header, "user", path, True)
    ci = _column(header, "item", path, True)
    cr = _column(header, "rating", path, min_rating is not None)
    ct = _column(header, "timestamp", path, False)
    for c in (cr, ct):
        if c is not None:
            t.parse(header[c], float)  # errors name file, row and column; NaN/inf refused
    user_index: dict[str, int] = {}
    item_index: dict[str, int] = {}
    us, its, rs, ts = [], [], [], []
    n_below = 0
    for k, r in enumerate(t.rows):
        rating = r[header[cr]] if cr is not None else None
        stamp = r[header[ct]] if ct is not None else None
        u, i = r[header[cu]].strip(), r[header[ci]].strip()
        for c, v in ((cu, u), (ci, i)):
            if not v:
                raise t.error(k, "empty id", header[c])
        if min_rating is not None and rating is not None and rating < min_rating:
            n_below += 1
            continue
        us.append(user_index.setdefault(u, len(user_index)))
        its.append(item_index.setdefault(i, len(item_index)))
        rs.append(rating)
        ts.append(stamp)
    if not us:
        raise UserError(f"{path}: no interactions left (min_rating={min_rating})")
    users = np.asarray(us, dtype=np.int64)
    items = np.asarray(its, dtype=np.int64)
    keys = users * len(item_index) + items
    _, first = np.unique(keys, return_index=True)
    first.sort()
    n_dup = len(users) - len(first)
    ratings = np.asarray(rs, dtype=np.float64)[first] if cr is not None else None
    stamps = np.asarray(ts, dtype=np.float64)[first] if ct is not None else None
    return Interactions(
        users=users[first],
        items=items[first],
        ratings=ratings,
        timestamps=stamps,
        user_ids=tuple(user_index),
        item_ids=tuple(item_index),
        n_duplicates=int(n_dup),
        n_below_rating=n_below,
    )


def split(
    data: Interactions,
    mode: str = "user_time",
    ratios: tuple[float, float, float] = (0.8, 0.1, 0.1),
    seed: int = 0,
    min_interactions: int = 3,
) -> Split:
    """Split interactions into train/validation/test.

    ``user_time`` (default): each user's interactions in time order, the last ``ratios[2]`` share
    is test, the ``ratios[1]`` before it validation (at least one each). ``random``: the same per
    user on a seeded permutation. ``global_time``: one global cut by timestamp quantiles.
    Users with fewer than ``min_interactions`` are dropped (counted) in the per-user modes.
    Items keep their indices (an item seen only in test stays a rankable column).
    """
    if mode not in SPLIT_MODES:
        raise UserError(f"split mode must be one of {SPLIT_MODES}; got {mode!r}")
    if len(ratios) != 3 or any(r < 0 for r in ratios) or abs(sum(ratios) - 1) > 1e-6:
        raise UserError(f"ratios must be three non-negative shares summing to 1; got {ratios}")
    if mode in ("user_time", "global_time") and data.timestamps is None:
        raise UserError(
            f"split mode {mode!r} needs a timestamp column, which this file lacks; "
            "use mode='random' instead"
        )
    n = len(data)
    part = np.zeros(n, dtype=np.int8)  # 0 train, 1 val, 2 test
    dropped = 0
    if mode == "global_time":
        order = np.lexsort((np.arange(n), data.timestamps))
        c1 = int(round(n * ratios[0]))
        c2 = int(round(n * (ratios[0] + ratios[1])))
        part[order[c1:c2]] = 1
        part[order[c2:]] = 2
    else:
        rng = np.random.default_rng(seed)
        key = data.timestamps if mode == "user_time" else rng.random(n)
        order = np.lexsort((np.arange(n), key, data.users))  # by user, then time, then file order
        bounds = np.searchsorted(data.users[order], np.arange(data.n_users + 1))
        keep = np.ones(n, dtype=bool)
        for u in range(data.n_users):
            idx = order[bounds[u] : bounds[u + 1]]
            m = len(idx)
            if m < min_interactions:
                keep[idx] = False
                dropped += m > 0
                continue
            n_test = max(1, int(round(m * ratios[2]))) if ratios[2] > 0 else 0
            n_val = max(1, int(round(m * ratios[1]))) if ratios[1] > 0 else 0
            part[idx[m - n_test :]] = 2
            part[idx[m - n_test - n_val : m - n_test]] = 1
        part[~keep] = -1
    shape = (data.n_users, data.n_items)
    mats = [_csr(data.users[part == p], data.items[part == p], shape) for p in (0, 1, 2)]
    if mats[0].nnz == 0:
        raise UserError("the training split is empty; use more data or larger ratios[0]")
    return Split(
        train=mats[0],
        val=mats[1],
        test=mats[2],
        user_ids=data.user_ids,
        item_ids=data.item_ids,
        n_dropped_users=dropped,
        mode=mode,
        info={"n_train": mats[0].nnz, "n_val": mats[1].nnz, "n_test": mats[2].nnz},
    )
