"""The item bank: 1PL/2PL/3PL item parameters in mirt's slope-intercept form, and its JSON file.

The item response function (ATLAS, after mirt's ``a1, d, g, u`` with ``u = 1``):

    P_i(theta) = g_i + (1 - g_i) * sigmoid(a_i * theta + d_i),    b_i = -d_i / a_i

and the Fisher information of item i at theta (standard 3PL form):

    I_i(theta) = a_i^2 * ((P - g) / (1 - g))^2 * (1 - P) / P

which reduces to ``a^2 P (1 - P)`` when ``g = 0``. Arrays: ``theta`` of shape ``(T,)`` and items of
shape ``(N,)`` give ``(T, N)`` float64 results.

The JSON bank (``schema_version`` 1) holds the parameters per item with flags (``nonpositive_a``
for a <= 0 items, which adaptive tests skip by default), the fit log and what cleaning excluded.

CSV exchange with R: :meth:`ItemBank.to_mirt_csv` / :meth:`ItemBank.from_mirt_csv` use the
layout of ``write.csv(coef(fit, IRTpars = FALSE, simplify = TRUE)$items)``: a first column of row
names (the item ids; header ``""``, or ``X`` after a ``read.csv`` round trip) and columns ``a1, d,
g, u``. The released ATLAS item-parameter files (``<bench>/irt_item_parameters_combined.csv`` in
the authors' repository) have this layout with header ``"X"`` and ids ``X<k>``, R's
``make.names`` of response-matrix column ``k``; :meth:`ItemBank.from_atlas_csv` reads them.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from icml26.core.errors import UserError
from icml26.core.io import atomic_write_json

__all__ = ["ItemBank", "irf", "item_information", "SCHEMA_VERSION", "MODELS"]

SCHEMA_VERSION = 1
MODELS = ("1PL", "2PL", "3PL")
MIRT_COLUMNS = ("a1", "d", "g", "u")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # stable for large |x|


def irf(theta, a, d, g) -> np.ndarray:
    """P(correct) of shape ``(T, N)`` for abilities ``theta (T,)`` and items ``a, d, g (N,)``."""
    theta = np.atleast_1d(np.asarray(theta, dtype=np.float64))
    z = theta[:, None] * np.asarray(a)[None, :] + np.asarray(d)[None, :]
    g = np.asarray(g)[None, :]
    return g + (1.0 - g) * _sigmoid(z)


def item_information(theta, a, d, g) -> np.ndarray:
    """Fisher information ``(T, N)`` of each item at each theta (nats^-1 per theta unit^2)."""
    p = irf(theta, a, d, g)
    g = np.asarray(g)[None, :]
    p = np.clip(p, 1e-300, 1.0)
    return np.asarray(a)[None, :] ** 2 * ((p - g) / (1.0 - g)) ** 2 * (1.0 - p) / p


@dataclass
class ItemBank:
    """Calibrated items.

    Attributes
    ----------
    ids : list of str, length N
    a, d, g : ndarray of shape (N,), float64
        Slope, intercept, lower asymptote (``g = 0`` for 1PL/2PL).
    model : "1PL" | "2PL" | "3PL"
    fit : dict
        The fit log: converged, iterations, loglik trace, quadrature, counts.
    excluded : dict
        ``{"items": [{"id", "reason"}], "models": [...]}`` dropped while cleaning.
    linking : dict or None
        Chunking and linking constants when the bank was fitted in chunks.
    """

    ids: list[str]
    a: np.ndarray
    d: np.ndarray
    g: np.ndarray
    model: str = "3PL"
    fit: dict = field(default_factory=dict)
    excluded: dict = field(default_factory=lambda: {"items": [], "models": []})
    linking: dict | None = None

    def __post_init__(self) -> None:
        self.ids = [str(i) for i in self.ids]
        self.a, self.d, self.g = (
            np.asarray(x, dtype=np.float64).reshape(-1) for x in (self.a, self.d, self.g)
        )
        n = len(self.ids)
        for name in ("a", "d", "g"):
            arr = getattr(self, name)
            if arr.shape != (n,):
                raise ValueError(f"item bank: `{name}` has {arr.size} values for {n} item ids")
            if not np.all(np.isfinite(arr)):
                bad = self.ids[int(np.flatnonzero(~np.isfinite(arr))[0])]
                raise UserError(f"item bank: `{name}` of item {bad!r} is not a finite number")
        if np.any((self.g < 0) | (self.g >= 1)):
            bad = self.ids[int(np.flatnonzero((self.g < 0) | (self.g >= 1))[0])]
            raise UserError(
                f"item bank: g of item {bad!r} must be in [0, 1); got {self.g[self.ids.index(bad)]}"
            )
        if self.model not in MODELS:
            raise UserError(
                f"item bank: model must be one of {', '.join(MODELS)}; got {self.model!r}"
            )
        if len(set(self.ids)) != n:
            raise UserError("item bank: duplicate item ids")
        self._index = {i: k for k, i in enumerate(self.ids)}

    # ---------------------------------------------------------------------------------------
    @property
    def n_items(self) -> int:
        return len(self.ids)

    @property
    def b(self) -> np.ndarray:
        """Difficulty ``-d / a`` (inf where a = 0)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return -self.d / self.a

    @property
    def nonpositive_a(self) -> np.ndarray:
        """Boolean mask (N,) of items flagged a <= 0 (information grows with a^2 even so)."""
        return self.a <= 0

    def index(self, item_ids) -> np.ndarray:
        """Column indices of ``item_ids``; UserError listing the first five unknown ids."""
        unknown = [i for i in item_ids if str(i) not in self._index]
        if unknown:
            raise UserError(
                f"{len(unknown)} item id(s) not in the bank, e.g. {', '.join(map(repr, unknown[:5]))}"
            )
        return np.array([self._index[str(i)] for i in item_ids], dtype=np.int64)

    def align(self, items, matrix) -> tuple[np.ndarray, list[str]]:
        """Put a response matrix over ``items`` (M, len(items)) on the bank's columns (M, N),
        NaN where unanswered. Items the bank dropped at calibration (``excluded``: constant or
        unanswered there) are left out and returned, so that a file holding them, such as the
        calibration file itself, can still be scored; any other unknown item is an error."""
        matrix = np.asarray(matrix, dtype=np.float64)
        dropped_at_fit = {e["id"] for e in self.excluded.get("items", [])}
        keep = [k for k, i in enumerate(items) if str(i) in self._index]
        dropped = [str(i) for i in items if str(i) not in self._index and str(i) in dropped_at_fit]
        unknown = [i for i in items if str(i) not in self._index and str(i) not in dropped_at_fit]
        if unknown:
            self.index(unknown)  # raises, naming the first five
        out = np.full((matrix.shape[0], self.n_items), np.nan)
        out[:, self.index([items[k] for k in keep])] = matrix[:, keep]
        return out, dropped

    def prob(self, theta) -> np.ndarray:
        """P(correct), shape (T, N)."""
        return irf(theta, self.a, self.d, self.g)

    def information(self, theta) -> np.ndarray:
        """Item information, shape (T, N)."""
        return item_information(theta, self.a, self.d, self.g)

    def subset(self, idx) -> ItemBank:
        idx = np.asarray(idx)
        return ItemBank(
            [self.ids[i] for i in idx],
            self.a[idx],
            self.d[idx],
            self.g[idx],
            model=self.model,
            fit=dict(self.fit),
            excluded=self.excluded,
        )

    # ---------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        b = self.b
        items = []
        for k, i in enumerate(self.ids):
            flags = ["nonpositive_a"] if self.a[k] <= 0 else []
            items.append(
                {
                    "id": i,
                    "a": float(self.a[k]),
                    "d": float(self.d[k]),
                    "g": float(self.g[k]),
                    "u": 1.0,
                    "b": float(b[k]) if math.isfinite(b[k]) else None,
                    "flags": flags,
                }
            )
        return {
            "schema_version": SCHEMA_VERSION,
            "model": self.model,
            "parameterization": "mirt slope-intercept: P = g + (1 - g) * sigmoid(a * theta + d); b = -d / a",
            "n_items": self.n_items,
            "n_nonpositive_a": int(self.nonpositive_a.sum()),
            "items": items,
            "fit": self.fit,
            "excluded": self.excluded,
            "linking": self.linking,
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write the bank as JSON, atomically."""
        return atomic_write_json(path, self.to_dict())

    @classmethod
    def from_dict(cls, obj: dict, source: str = "bank") -> ItemBank:
        if not isinstance(obj, dict):
            raise UserError(f"{source}: expected a JSON object")
        version = obj.get("schema_version")
        if version != SCHEMA_VERSION:
            raise UserError(
                f"{source}: unknown schema_version {version!r}; this icml26 reads {SCHEMA_VERSION}"
            )
        items = obj.get("items")
        if not isinstance(items, list) or not items:
            raise UserError(f"{source}: `items` must be a non-empty list")
        cols: dict[str, list] = {"id": [], "a": [], "d": [], "g": []}
        for k, it in enumerate(items):
            for key in cols:
                if key not in it:
                    raise UserError(f"{source}: item #{k} lacks field `{key}`")
                val = it[key]
                if key != "id" and (
                    val is None or not isinstance(val, (int, float)) or not math.isfinite(val)
                ):
                    raise UserError(
                        f"{source}: item {it.get('id')!r} field `{key}` must be a finite number; got {val!r}"
                    )
                cols[key].append(val)
        try:
            return cls(
                cols["id"],
                cols["a"],
                cols["d"],
                cols["g"],
                model=obj.get("model", "3PL"),
                fit=obj.get("fit") or {},
                excluded=obj.get("excluded") or {"items": [], "models": []},
                linking=obj.get("linking"),
            )
        except UserError as exc:
            raise UserError(f"{source}: {exc}") from None

    @classmethod
    def load(cls, path: str | os.PathLike) -> ItemBank:
        path = Path(path)
        try:
            obj = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UserError(f"bank file {path} does not exist") from None
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}: not valid JSON ({exc})") from None
        return cls.from_dict(obj, source=str(path))

    # ---------------------------------------------------------------------------------------
    # R / mirt exchange

    def to_mirt_csv(self, path: str | os.PathLike) -> Path:
        """Write ``"", a1, d, g, u`` rows as R's ``write.csv`` of mirt's ``coef(...)$items`` does
        (``u = 1``; floats as Python's shortest round-trip repr, so :meth:`from_mirt_csv` reads
        back the same values)."""
        from icml26.core.io import atomic_open

        path = Path(path)
        with atomic_open(path, "w", encoding="utf-8", newline="") as f:
            w = csv.writer(f, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n")
            w.writerow(["", *MIRT_COLUMNS])
            for k, i in enumerate(self.ids):
                w.writerow([i, *(float(x[k]) for x in (self.a, self.d, self.g)), 1.0])
        return path

    @classmethod
    def from_mirt_csv(
        cls, path: str | os.PathLike, model: str | None = None, *, strip_r_names: bool = False
    ) -> ItemBank:
        """Read a bank from mirt's ``coef(..., IRTpars = FALSE, simplify = TRUE)$items`` as CSV.

        The first column holds the item ids (any header: R writes ``""``); the others must include
        ``a1``, ``d``, ``g`` and ``u`` (more columns are an error: mirt writes them only for
        multidimensional or other item types, which this bank cannot hold). ``u`` must be 1
        (no 4PL). ``model``: None infers "3PL" when any g > 0, "1PL" when all slopes are equal,
        else "2PL". ``strip_r_names``: undo R's ``make.names`` on ids (``X12`` -> ``12``).
        """
        from icml26.core.tables import read_table

        path = Path(path)
        t = read_table(path, what="items")
        src = str(path)
        if len(t.columns) < 2:
            raise UserError(f"{src}: expected an item-id column then a1, d, g, u")
        id_col, cols = t.columns[0], t.columns[1:]
        missing = [c for c in MIRT_COLUMNS if c not in cols]
        if missing:
            raise UserError(
                f"{src}: mirt item table lacks column(s) {', '.join(missing)}; found "
                f"{', '.join(cols)} (write coef(fit, IRTpars = FALSE, simplify = TRUE)$items)"
            )
        extra = [c for c in cols if c not in MIRT_COLUMNS]
        if extra:
            raise UserError(
                f"{src}: unexpected column(s) {', '.join(extra)}; a unidimensional "
                "dichotomous bank has only a1, d, g, u"
            )
        ids, vals = [], {c: [] for c in MIRT_COLUMNS}
        for k, row in enumerate(t.rows):
            item = str(row.get(id_col) or "").strip()
            if not item:
                raise t.error(k, "empty item id", id_col)
            if strip_r_names:
                item = re.sub(r"^X(?=[0-9.])", "", item)
            ids.append(item)
            for c in MIRT_COLUMNS:
                raw = row.get(c)
                try:
                    v = float(raw)
                except (TypeError, ValueError):
                    raise t.error(k, f"{raw!r} is not a number", c) from None
                if not math.isfinite(v):
                    raise t.error(k, f"{raw!r} is not finite", c)
                vals[c].append(v)
        u = np.array(vals["u"])
        if np.any(u != 1):
            k = int(np.flatnonzero(u != 1)[0])
            raise t.error(k, f"u = {u[k]:g}: upper asymptotes below 1 (4PL) are not supported", "u")
        a, d, g = (np.array(vals[c]) for c in ("a1", "d", "g"))
        if model is None:
            model = "3PL" if np.any(g > 0) else ("1PL" if np.ptp(a) == 0 else "2PL")
        if model != "3PL" and np.any(g != 0):
            raise UserError(f"{src}: model {model!r} needs g = 0 for every item")
        try:
            return cls(ids, a, d, g, model=model, fit={"source": src})
        except UserError as exc:
            raise UserError(f"{src}: {exc}") from None

    @classmethod
    def from_atlas_csv(cls, path: str | os.PathLike) -> ItemBank:
        """A released ATLAS item-parameter file (mirt layout, header ``"X"``, ids ``X<k>``): a 3PL
        bank whose ids are the response matrix's column names again (``X12`` -> ``12``)."""
        return cls.from_mirt_csv(path, model="3PL", strip_r_names=True)
