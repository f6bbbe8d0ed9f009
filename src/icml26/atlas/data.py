"""Response matrices: reading CSV / Parquet (wide or long) and cleaning.

Formats
-------
* wide: one row per model; the first column holds the model id (any header), every other column
  is an item id; cells are 0, 1, or empty / NA / NaN (missing).
* long: columns ``model, item, correct`` (any order, case-insensitive; more columns ignored); a
  (model, item) pair absent from the file is missing; repeated identical rows are accepted,
  conflicting ones are an error.

Parquet files need ``pyarrow``. Every error names the file and, for cells, the model, the item
and the value.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from icml26.core.errors import UserError
from icml26.core.tables import read_table

__all__ = ["Responses", "load_responses", "clean"]

_MISSING = {"", "na", "nan", "null", "none", "n/a"}
_LONG_COLUMNS = ("model", "item", "correct")


@dataclass
class Responses:
    """A response matrix.

    matrix : ndarray of shape (n_models, n_items), float64: 1.0 correct, 0.0 wrong, NaN missing
    models, items : lists of str ids (rows, columns)
    source : where it came from, for messages
    """

    matrix: np.ndarray
    models: list[str]
    items: list[str]
    source: str = "responses"

    def __post_init__(self) -> None:
        self.matrix = np.asarray(self.matrix, dtype=np.float64)
        if self.matrix.ndim != 2:
            raise UserError(f"{self.source}: responses must be a 2-D (models x items) matrix")
        m, n = self.matrix.shape
        if len(self.models) != m or len(self.items) != n:
            raise ValueError(
                f"{self.source}: {m}x{n} matrix but {len(self.models)} models, {len(self.items)} items"
            )
        for kind, ids in (("model", self.models), ("item", self.items)):
            seen: set[str] = set()
            for i in ids:
                if i in seen:
                    raise UserError(f"{self.source}: duplicate {kind} id {i!r}")
                seen.add(i)
        bad = ~np.isnan(self.matrix) & (self.matrix != 0) & (self.matrix != 1)
        if bad.any():
            r, c = np.argwhere(bad)[0]
            raise UserError(
                f"{self.source}: model {self.models[r]!r}, item {self.items[c]!r}: value "
                f"{self.matrix[r, c]!r} is not 0, 1 or missing"
            )

    @classmethod
    def from_array(cls, matrix, models=None, items=None, source: str = "array") -> Responses:
        matrix = np.asarray(matrix, dtype=np.float64)
        if matrix.ndim != 2:
            raise UserError(f"{source}: responses must be a 2-D (models x items) matrix")
        models = [str(m) for m in (models if models is not None else range(matrix.shape[0]))]
        items = [str(i) for i in (items if items is not None else range(matrix.shape[1]))]
        return cls(matrix, models, items, source)


def _cell(value, source: str, model: str, item: str) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        if isinstance(value, float) and math.isnan(value):
            return math.nan
        if value in (0, 1):
            return float(value)
    else:
        s = str(value).strip()
        if s.lower() in _MISSING:
            return math.nan
        if s in ("0", "1", "0.0", "1.0", "True", "False", "true", "false"):
            return 1.0 if s in ("1", "1.0", "True", "true") else 0.0
    raise UserError(
        f"{source}: model {model!r}, item {item!r}: value {value!r} is not 0, 1 or missing"
    )


def _read_table(path: Path):
    """The file as a :class:`~icml26.core.tables.Table` (CSV/TSV cells as str, Parquet and JSONL
    cells as Python values): BOM, delimiter, empty and header-only files, duplicate columns and
    ragged rows are handled there."""
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".tsv", ".txt", ".parquet", ".pq", ".jsonl"):
        raise UserError(f"{path}: unknown extension {suffix!r}; use .csv, .tsv or .parquet")
    return read_table(path, what="responses")


def _text(v) -> str:
    return "" if v is None else str(v).strip()


def load_responses(path: str | os.PathLike, layout: str = "auto") -> Responses:
    """Read a response matrix from CSV / TSV / Parquet, wide or long (``layout`` "auto" decides
    by the header: long when it has model, item and correct columns)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"responses file {path} does not exist")
    t = _read_table(path)
    header, rows = t.columns, [[r.get(c) for c in t.columns] for r in t.rows]
    lower = [h.lower() for h in header]
    is_long = all(c in lower for c in _LONG_COLUMNS)
    if layout == "auto":
        layout = "long" if is_long else "wide"
    src = str(path)
    if layout == "long":
        missing = [c for c in _LONG_COLUMNS if c not in lower]
        if missing:
            raise UserError(
                f"{src}: long layout needs columns model, item, correct; missing {', '.join(missing)}"
            )
        im, ii, ic = (lower.index(c) for c in _LONG_COLUMNS)
        t.require([header[im], header[ii], header[ic]])  # JSONL: in every row
        cells: dict[tuple[str, str], float] = {}
        models: dict[str, int] = {}
        items: dict[str, int] = {}
        for k, row in enumerate(rows):
            m, i = _text(row[im]), _text(row[ii])
            if not m or not i:
                raise t.error(k, "empty model or item id")
            v = _cell(row[ic], src, m, i)
            key = (m, i)
            if key in cells and not (cells[key] == v or (math.isnan(cells[key]) and math.isnan(v))):
                raise UserError(
                    f"{src}: conflicting rows for model {m!r}, item {i!r}: {cells[key]} and {v}"
                )
            cells[key] = v
            models.setdefault(m, len(models))
            items.setdefault(i, len(items))
        mat = np.full((len(models), len(items)), np.nan)
        for (m, i), v in cells.items():
            mat[models[m], items[i]] = v
        resp = Responses(mat, list(models), list(items), src)
    elif layout == "wide":
        if len(header) < 2:
            raise UserError(f"{src}: wide layout needs a model column and at least one item column")
        items = header[1:]
        models, data = [], []
        for row in rows:
            m = _text(row[0])
            models.append(m)
            data.append([_cell(v, src, m, it) for v, it in zip(row[1:], items, strict=True)])
        resp = Responses(
            np.array(data, dtype=np.float64).reshape(len(models), len(items)), models, items, src
        )
    else:
        raise UserError(f"layout must be 'auto', 'wide' or 'long'; got {layout!r}")
    if resp.matrix.size == 0:
        raise UserError(f"{src}: no responses")
    return resp


def clean(R: Responses, drop_constant_models: bool = True) -> tuple[Responses, dict]:
    """Drop constant (all right / all wrong / never observed) items and models until none is left.

    ``drop_constant_models=False`` keeps all-right / all-wrong models (marginal ML uses them; mirt
    keeps them), still dropping models with no response at all.

    Returns the cleaned Responses and ``{"items": [{"id", "reason"}], "models": [...]}``.
    Raises UserError when nothing is left.
    """
    mat, models, items = R.matrix, list(R.models), list(R.items)
    excluded: dict[str, list] = {"items": [], "models": []}

    def reason(x: np.ndarray) -> str | None:
        obs = x[~np.isnan(x)]
        if obs.size == 0:
            return "no responses"
        if np.all(obs == 1):
            return "constant: all correct"
        if np.all(obs == 0):
            return "constant: all wrong"
        return None

    changed = True
    while changed and mat.size:
        changed = False
        why = [reason(mat[:, j]) for j in range(mat.shape[1])]
        drop = [j for j, w in enumerate(why) if w]
        if drop:
            excluded["items"] += [{"id": items[j], "reason": why[j]} for j in drop]
            keep = [j for j in range(mat.shape[1]) if not why[j]]
            mat, items, changed = mat[:, keep], [items[j] for j in keep], True
        why = [reason(mat[i, :]) for i in range(mat.shape[0])]
        if not drop_constant_models:
            why = [w if w == "no responses" else None for w in why]
        drop = [i for i, w in enumerate(why) if w]
        if drop:
            excluded["models"] += [{"id": models[i], "reason": why[i]} for i in drop]
            keep = [i for i in range(mat.shape[0]) if not why[i]]
            mat, models, changed = mat[keep, :], [models[i] for i in keep], True
    if mat.shape[0] == 0 or mat.shape[1] == 0:
        raise UserError(
            f"{R.source}: nothing left once constant items and models are dropped "
            f"({len(excluded['items'])} items, {len(excluded['models'])} models dropped)"
        )
    return Responses(mat, models, items, R.source), excluded
