"""Response tables from other tools: lm-evaluation-harness ``--log_samples`` files.

lm-eval (``lm_eval --log_samples --output_path OUT``) writes, per model, a folder
``OUT/<model name>/`` holding ``samples_<task>_<timestamp>.jsonl``: one JSON object per line and
per document, with ``doc_id`` (the document's index in the task) and one field per metric
(``acc``, ``acc_norm``, ``exact_match``, … as 0/1 numbers); newer versions add ``filter`` (tasks
with several answer filters, e.g. GSM8K's ``strict-match`` / ``flexible-extract``, log each
document once per filter) and ``metrics`` (the metric names).

:func:`read_lm_eval_samples` turns such files into a :class:`~icml26.atlas.data.Responses`:
one row per model (the folder name, or ``model=``), one column per ``<task>:<doc_id>``, the
chosen metric as 0/1. :func:`write_long` writes any response matrix as the long
``model,item,correct`` table that ``icml26 atlas calibrate`` reads.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from icml26.atlas.data import Responses
from icml26.core.errors import UserError

__all__ = ["read_lm_eval_samples", "sample_files", "task_of", "write_long"]

# samples_<task>_<ISO timestamp with ':' replaced>.jsonl, e.g. samples_arc_easy_2024-05-13T14-26-39.123456.jsonl
_NAME = re.compile(r"^samples_(?P<task>.+?)(?:_(?P<stamp>\d{4}-\d{2}-\d{2}T[0-9.\-]+))?\.jsonl$")


def task_of(path: str | os.PathLike) -> str:
    """The task name in an lm-eval samples file name (``samples_<task>_<timestamp>.jsonl``)."""
    m = _NAME.match(Path(path).name)
    if m is None:
        raise UserError(f"{path}: not an lm-eval samples file (samples_<task>_<timestamp>.jsonl)")
    return m.group("task")


def sample_files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """The files named, and every ``samples_*.jsonl`` under the folders named, sorted."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.rglob("samples_*.jsonl"))
            if not found:
                raise UserError(f"{p}: no samples_*.jsonl file in this folder or below it")
            out += found
        elif p.is_file():
            out.append(p)
        else:
            raise UserError(f"{p}: no such file or folder")
    return out


def _binary(v, where: str, metric: str) -> float:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)) and v in (0, 1):
        return float(v)
    raise UserError(
        f"{where}: `{metric}` = {v!r} is not 0 or 1; an item bank needs a right/wrong metric "
        "(choose it with metric=, CLI --metric)"
    )


def _records(path: Path, metric: str, filter_name: str | None) -> list[tuple[int, float, int]]:
    """(doc_id, value, line) of one file, for one filter."""
    rows, filters = [], set()
    with path.open(encoding="utf-8-sig") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}: line {line_no}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{where}: not valid JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise UserError(f"{where}: expected a JSON object")
            if "doc_id" not in obj:
                raise UserError(f"{where}: no `doc_id` field (is this an lm-eval samples file?)")
            if metric not in obj:
                names = obj.get("metrics") or sorted(
                    k for k, v in obj.items() if isinstance(v, (int, float, bool)) and k != "doc_id"
                )
                raise UserError(
                    f"{where}: no `{metric}` field; this file's metrics: {', '.join(names) or 'none'}"
                )
            doc = obj["doc_id"]
            if isinstance(doc, bool) or not isinstance(doc, int) or doc < 0:
                raise UserError(f"{where}: `doc_id` = {doc!r} is not a non-negative integer")
            filt = obj.get("filter")
            filters.add(filt)
            rows.append((filt, doc, _binary(obj[metric], where, metric), line_no))
    if not rows:
        raise UserError(f"{path}: no samples")
    if filter_name is None:
        if len(filters) > 1:
            raise UserError(
                f"{path}: documents are logged under several filters "
                f"({', '.join(sorted(map(str, filters)))}); choose one with filter= (CLI --filter)"
            )
        return [(d, v, n) for _, d, v, n in rows]
    if filter_name not in filters:
        raise UserError(
            f"{path}: no samples with filter {filter_name!r}; it has "
            f"{', '.join(sorted(map(str, filters)))}"
        )
    return [(d, v, n) for f_, d, v, n in rows if f_ == filter_name]


def read_lm_eval_samples(
    paths: Iterable[str | os.PathLike] | str | os.PathLike,
    metric: str = "acc",
    *,
    model: str | None = None,
    filter: str | None = None,  # noqa: A002 - lm-eval's own field name
) -> Responses:
    """A response matrix from lm-eval ``samples_<task>_*.jsonl`` files (or folders of them).

    Parameters
    ----------
    paths : files and/or folders; folders are searched recursively for ``samples_*.jsonl``
    metric : the 0/1 field to read (``acc``, ``acc_norm``, ``exact_match``, …)
    model : the model id for every file; default: each file's folder name (lm-eval's layout)
    filter : which answer filter to keep when a file logs several (``strict-match``, …)

    Returns a :class:`~icml26.atlas.data.Responses` (models x ``<task>:<doc_id>`` items; an item
    a model has no sample for is missing). The same (model, item) read twice with the same value
    is kept once; with different values it is an error naming both files.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files = sample_files(paths)
    cells: dict[tuple[str, str], tuple[float, str]] = {}
    models: dict[str, None] = {}
    items: dict[str, None] = {}
    for path in files:
        task = task_of(path)
        who = model or path.parent.name
        models.setdefault(who, None)
        for doc, v, line in _records(path, metric, filter):
            item = f"{task}:{doc}"
            items.setdefault(item, None)
            where = f"{path}: line {line}"
            old = cells.get((who, item))
            if old is not None and old[0] != v:
                raise UserError(
                    f"conflicting `{metric}` for model {who!r}, item {item!r}: {old[0]:g} at "
                    f"{old[1]} and {v:g} at {where}"
                )
            cells[(who, item)] = (v, where)
    m_idx = {m: i for i, m in enumerate(models)}
    i_idx = {it: j for j, it in enumerate(items)}
    mat = np.full((len(m_idx), len(i_idx)), np.nan)
    for (m, it), (v, _) in cells.items():
        mat[m_idx[m], i_idx[it]] = v
    src = str(files[0].parent) if len(files) == 1 else f"{len(files)} lm-eval samples files"
    return Responses(mat, list(m_idx), list(i_idx), src)


def write_long(
    path: str | os.PathLike, R: Responses, *, models: Sequence[str] | None = None
) -> Path:
    """Write ``R`` as the long table ``model,item,correct`` (.csv or .parquet), missing cells
    left out; atomically. ``models`` renames the rows."""
    from icml26.core.io import atomic_open

    path = Path(path)
    if path.suffix.lower() not in (".csv", ".parquet"):
        raise UserError(f"{path}: expected a .csv or .parquet file")
    names = list(models) if models is not None else R.models
    r, c = np.nonzero(~np.isnan(R.matrix))
    cols = {
        "model": [names[i] for i in r],
        "item": [R.items[j] for j in c],
        "correct": [int(R.matrix[i, j]) for i, j in zip(r, c, strict=True)],
    }
    if path.suffix.lower() == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        with atomic_open(path, "wb") as f:
            pq.write_table(pa.table(cols), f)
    else:
        import csv

        with atomic_open(path, "w", encoding="utf-8", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["model", "item", "correct"])
            w.writerows(zip(cols["model"], cols["item"], cols["correct"], strict=True))
    return path
