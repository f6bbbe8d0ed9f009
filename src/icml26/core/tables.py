"""One reader for user tables: CSV / TSV (any of ``, \\t ; |``), JSONL and Parquet.

:func:`read_table` returns a :class:`Table` (the header and one ``dict`` per data row) or raises
:class:`~icml26.core.errors.UserError` with a message that names the file and, for a cell, the
row and the column::

    data.csv: row 3, column 'rating': expected a number, got 'x' (line 4)

Row numbers count data rows from 1 (the first row under the header; blank lines are skipped and
not counted); ``line`` is the physical line of the file, as an editor shows it.

What it handles, so that each method's reader does not have to:

- a UTF-8 byte-order mark (and UTF-16 files with one); text that is not UTF-8 is refused;
- the delimiter: sniffed on the header among ``, \\t ; |`` (the one that splits it into the most
  columns, ties broken by :class:`csv.Sniffer` and then by the file's extension: ``.tsv`` and
  RecBole's ``.inter``/``.item``/``.user`` mean tab, others comma); a one-column file keeps the
  extension's delimiter;
- an empty file ("empty file") and a header with no rows ("no rows"), unless ``allow_empty``;
- duplicate or (beyond one) empty column names, naming the column;
- rows with more or fewer fields than the header (extra *empty* trailing fields are dropped);
- a missing required column, listing the columns found;
- typed columns (``types``): a value that does not parse names file, row and column; an empty
  value is an error unless the column is ``nullable`` (then ``None``); NaN and infinities are
  refused unless ``allow_nonfinite`` (``True`` or a set of column names);
- ``sort_by``: a column that must be non-decreasing (a timestamp): rows out of order are sorted
  (stable) with a :class:`TableOrderWarning` and a note in ``Table.notes``
  (``on_unsorted="sort"``) or refused naming the first such row (``on_unsorted="refuse"``);
- JSONL (``.jsonl``/``.ndjson``): one object per line; bad JSON, a line that is not an object or
  a key given twice names the row; a required key absent from a row names the row;
- Parquet (``.parquet``/``.pq``, or a file starting with ``PAR1``): read with pyarrow, imported
  only then. Cells keep their Python types (``None`` for null).

CSV cells are strings (stripped of surrounding blanks unless ``strip=False``); columns without a
declared type keep the value as read.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import warnings
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icml26.core.errors import UserError

__all__ = ["Table", "TableOrderWarning", "Parser", "read_table", "integer", "number", "DELIMITERS"]

DELIMITERS = (",", "\t", ";", "|")
_TAB_EXT = {".tsv", ".tab", ".inter", ".item", ".user", ".kg", ".link", ".net"}
_JSONL_EXT = {".jsonl", ".ndjson"}
_PARQUET_EXT = {".parquet", ".pq"}
_SAMPLE = 1 << 16


class TableOrderWarning(UserWarning):
    """A table's rows were out of order in its ``sort_by`` column; :func:`read_table` sorted them."""


# --------------------------------------------------------------------------------------- parsers


class Parser:
    """A cell parser with a name for messages; raises ValueError with the reason."""

    def __init__(self, fn: Callable[[Any], Any], kind: str):
        self.fn, self.kind = fn, kind

    def __call__(self, value: Any) -> Any:
        return self.fn(value)


def _to_float(value: Any, kind: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"expected {kind}, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalars
        return _to_float(value.item(), kind)
    try:
        return float(str(value).strip())
    except ValueError:
        raise ValueError(f"expected {kind}, got {value!r}") from None


def number(minimum: float | None = None, maximum: float | None = None) -> Parser:
    """A float column, optionally bounded (``minimum <= x <= maximum``); NaN/inf are checked by
    :func:`read_table` (``allow_nonfinite``), not here."""
    kind = "a number" + (f" >= {minimum:g}" if minimum is not None else "") + (
        f" <= {maximum:g}" if maximum is not None else "")

    def parse(value: Any) -> float:
        x = _to_float(value, kind)
        if math.isfinite(x) and ((minimum is not None and x < minimum)
                                 or (maximum is not None and x > maximum)):
            raise ValueError(f"expected {kind}, got {value!r}")
        return x

    return Parser(parse, kind)


def integer(minimum: int | None = None, maximum: int | None = None) -> Parser:
    """An int column (``"3"``, ``"3.0"`` and ``3.0`` are 3; ``"2.5"`` is an error), optionally
    bounded."""
    kind = "an integer" + (f" >= {minimum}" if minimum is not None else "") + (
        f" <= {maximum}" if maximum is not None else "")

    def parse(value: Any) -> int:
        if isinstance(value, bool):
            raise ValueError(f"expected {kind}, got {value!r}")
        if isinstance(value, int):
            n = value
        else:
            s = value if isinstance(value, float) else str(value).strip()
            try:
                n = int(s) if isinstance(s, str) and s.lstrip("+-").isdigit() else None
            except ValueError:
                n = None
            if n is None:
                x = _to_float(value, kind)
                if not math.isfinite(x) or x != int(x):
                    raise ValueError(f"expected {kind}, got {value!r}")
                n = int(x)
        if (minimum is not None and n < minimum) or (maximum is not None and n > maximum):
            raise ValueError(f"expected {kind}, got {value!r}")
        return n

    return Parser(parse, kind)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _parser(spec: Any) -> Callable[[Any], Any]:
    if isinstance(spec, Parser):
        return spec
    if spec in ("int", int):
        return integer()
    if spec in ("float", float):
        return number()
    if spec in ("str", str):
        return Parser(_text, "text")
    if callable(spec):
        return spec
    raise ValueError(f"unknown column type {spec!r}; use int, float, str or a callable")


def _is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _nonfinite(value: Any) -> bool:
    try:
        return isinstance(value, float) and not math.isfinite(value) or (
            hasattr(value, "dtype") and value.dtype.kind == "f" and not math.isfinite(float(value)))
    except (TypeError, ValueError):
        return False


# ----------------------------------------------------------------------------------------- table


@dataclass
class Table:
    """A parsed table: ``columns`` (header order), ``rows`` (one dict per data row),
    ``row_numbers`` (1-based data row of each row in the file, kept through sorting), ``lines``
    (physical line of each row, ``None`` for Parquet), ``notes`` (e.g. that rows were sorted)."""

    path: Path
    columns: list[str]
    rows: list[dict]
    row_numbers: list[int]
    lines: list[int | None]
    notes: list[str] = field(default_factory=list)
    format: str = "csv"
    delimiter: str | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def column(self, name: str) -> list:
        return [r.get(name) for r in self.rows]

    def where(self, i: int, column: str | None = None) -> str:
        """``"file: row R, column 'c'"`` for row index ``i`` (its position in ``rows``)."""
        s = f"{self.path}: row {self.row_numbers[i]}"
        return s + (f", column {column!r}" if column is not None else "")

    def line_suffix(self, i: int) -> str:
        return f" (line {self.lines[i]})" if self.lines[i] is not None else ""

    def error(self, i: int, detail: str, column: str | None = None) -> UserError:
        """A :class:`UserError` naming file, row (and column) of row index ``i``."""
        return UserError(f"{self.where(i, column)}: {detail}{self.line_suffix(i)}")

    def require(self, columns: Iterable[str]) -> None:
        """Every column named must be in the header (JSONL: in every row)."""
        columns = list(columns)
        missing = [c for c in columns if c not in self.columns]
        if missing:
            raise UserError(f"{self.path}: missing column(s) {', '.join(missing)}; "
                            f"found {', '.join(self.columns) or 'none'}")
        if self.format == "jsonl":
            for i, r in enumerate(self.rows):
                for c in columns:
                    if c not in r:
                        raise self.error(i, f"no {c!r} key (the other rows have it)")

    def parse(self, column: str, parser: Any, *, nullable: bool = False,
              allow_nonfinite: bool = False) -> Table:
        """Convert ``column`` in place with ``parser`` (int, float, str, :func:`integer`,
        :func:`number` or a callable raising ValueError); errors name row and column."""
        fn = _parser(parser)
        kind = getattr(fn, "kind", None)
        for i, r in enumerate(self.rows):
            if column not in r:
                continue
            v = r[column]
            if _is_empty(v) or (isinstance(v, float) and math.isnan(v) and nullable):
                if nullable:
                    r[column] = None
                    continue
                if kind != "text":
                    raise self.error(i, f"empty value; expected {kind or 'a value'}", column)
            try:
                out = fn(v)
            except UserError:
                raise
            except (ValueError, TypeError, ArithmeticError) as exc:
                detail = str(exc) if kind else f"cannot parse {v!r} ({exc})"
                raise self.error(i, detail, column) from None
            if not allow_nonfinite and _nonfinite(out):
                raise self.error(i, f"{v!r} is not a finite number (NaN and infinities are not "
                                    "accepted here)", column)
            r[column] = out
        return self

    def keep(self, flags: Sequence[bool]) -> Table:
        """Keep the rows whose flag is true (row numbers and lines follow)."""
        idx = [i for i, f in enumerate(flags) if f]
        self.rows = [self.rows[i] for i in idx]
        self.row_numbers = [self.row_numbers[i] for i in idx]
        self.lines = [self.lines[i] for i in idx]
        return self

    def head(self, n: int) -> Table:
        """Keep the first ``n`` rows."""
        del self.rows[n:], self.row_numbers[n:], self.lines[n:]
        return self

    def sort_by(self, column: str, on_unsorted: str = "sort", *, what: str | None = None,
                warning: type[Warning] = TableOrderWarning, stacklevel: int = 2,
                shown: Mapping[int, str] | None = None,
                hint: str = "on_unsorted='sort'") -> Table:
        """Rows must be non-decreasing in ``column`` (already parsed). ``on_unsorted="sort"``
        sorts them (stable) with a ``warning`` and a note; ``"refuse"`` raises naming the first
        row that is smaller than one before it. ``what`` names the order in messages."""
        if on_unsorted not in ("sort", "refuse"):
            raise ValueError(f"on_unsorted must be 'sort' or 'refuse'; got {on_unsorted!r}")
        rule = f"in {what}" if what else f"sorted by {column!r}"
        what = what or "order"
        first, n_back, last = None, 0, None
        for i, r in enumerate(self.rows):
            v = r.get(column)
            if v is None:
                continue
            if last is not None and v < last:
                if on_unsorted == "refuse":
                    raise self.error(
                        i, f"{(shown or {}).get(i, v)!r} is earlier than the row before it (rows must "
                        f"be {rule}; {hint} sorts them)", column)
                n_back += 1
                first = i if first is None else first
            last = v if last is None or v > last else last
        if n_back:
            msg = (f"{self.path}: {n_back} row(s) are out of {what} (first: row "
                   f"{self.row_numbers[first]}, column {column!r}); sorted by {column!r}")
            self.notes.append(msg)
            warnings.warn(warning(msg), stacklevel=stacklevel + 1)
            idx = sorted(range(len(self.rows)),
                         key=lambda j: (self.rows[j].get(column) is None, self.rows[j].get(column)
                                        if self.rows[j].get(column) is not None else 0))
            self.rows = [self.rows[j] for j in idx]
            self.row_numbers = [self.row_numbers[j] for j in idx]
            self.lines = [self.lines[j] for j in idx]
        return self


# --------------------------------------------------------------------------------------- reading


def read_table(path: str | os.PathLike, *, required: Iterable[str] = (),
               types: Mapping[str, Any] | None = None, nullable: Collection[str] = (),
               sort_by: str | None = None, on_unsorted: str = "sort",
               allow_nonfinite: bool | Collection[str] = False, allow_empty: bool = False,
               delimiter: str | None = None, typed_header: bool = False, strip: bool = True,
               max_rows: int | None = None, encoding_errors: str = "strict",
               what: str = "rows", order_name: str | None = None,
               order_warning: type[Warning] = TableOrderWarning,
               format: str | None = None) -> Table:
    """Read a user table; see the module docstring for the rules. Returns a :class:`Table`.

    ``types`` maps column names to int, float, str, :func:`integer`, :func:`number` or a callable
    (columns absent from the file are skipped unless ``required``). ``typed_header`` drops
    RecBole's ``:token``/``:float`` suffixes from header names. ``max_rows`` stops after that many
    data rows. ``what`` names the rows in the "no rows" message (``"no requests: ..."``).
    ``format`` (``"csv"``, ``"jsonl"``, ``"parquet"``) overrides the choice by extension.
    """
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such file")
    if path.is_dir():
        raise UserError(f"{path} is a folder; expected a table file")
    if max_rows is not None and max_rows < 1:
        raise ValueError(f"max_rows must be >= 1; got {max_rows}")
    suffix = path.suffix.lower()
    with path.open("rb") as fb:
        magic = fb.read(4)
    if format not in (None, "csv", "jsonl", "parquet"):
        raise ValueError(f"format must be csv, jsonl or parquet; got {format!r}")
    if format == "parquet" or (format is None and (suffix in _PARQUET_EXT or magic == b"PAR1")):
        t = _read_parquet(path, strip)
    elif format == "jsonl" or (format is None and suffix in _JSONL_EXT):
        t = _read_jsonl(path, strip, max_rows, encoding_errors)
    else:
        t = _read_delimited(path, delimiter, typed_header, strip, max_rows, encoding_errors)
    if max_rows is not None and len(t.rows) > max_rows:
        del t.rows[max_rows:], t.row_numbers[max_rows:], t.lines[max_rows:]
    t.require(required)
    if not t.rows and not allow_empty:
        raise UserError(f"{path}: no {what}: a header and no data rows" if t.format == "csv"
                        else f"{path}: no {what}: the file has no data rows (an empty file?)")
    nonfinite_ok = (lambda c: True) if allow_nonfinite is True else (
        (lambda c: False) if not allow_nonfinite else (lambda c: c in allow_nonfinite))
    for col, spec in (types or {}).items():
        if col in t.columns:
            t.parse(col, spec, nullable=col in nullable, allow_nonfinite=nonfinite_ok(col))
    if sort_by is not None and t.rows:
        t.require([sort_by])
        t.sort_by(sort_by, on_unsorted, what=order_name, warning=order_warning, stacklevel=2)
    return t


def _check_header(path: Path, names: Sequence[str]) -> None:
    seen: dict[str, int] = {}
    for j, name in enumerate(names, 1):
        if name in seen:
            shown = repr(name) if name else "'' (an empty name)"
            raise UserError(f"{path}: duplicate column {shown} in the header (columns {seen[name]} "
                            f"and {j}); rename one")
        seen[name] = j


def _open_text(path: Path, errors: str) -> io.TextIOBase:
    with path.open("rb") as fb:
        head = fb.read(4)
    # -sig: a UTF-8 byte-order mark is dropped
    enc = "utf-16" if head[:2] in (b"\xff\xfe", b"\xfe\xff") else "utf-8-sig"
    return path.open(newline="", encoding=enc, errors=errors)


def _decode_error(path: Path, exc: UnicodeError) -> UserError:
    return UserError(f"{path}: not UTF-8 text ({exc.reason} at byte {getattr(exc, 'start', '?')}); "
                     "save it as UTF-8")


def _sniff(path: Path, sample: str, default: str) -> str:
    """The delimiter among :data:`DELIMITERS` that splits the header into the most fields."""
    lines = [ln for ln in sample.splitlines() if ln.strip()]
    if not lines:
        return default
    header = lines[0]
    counts = {}
    for d in DELIMITERS:
        try:
            counts[d] = len(next(csv.reader([header], delimiter=d)))
        except (csv.Error, StopIteration):
            counts[d] = 1
    best = max(counts.values())
    if best < 2:
        return default
    tied = [d for d in DELIMITERS if counts[d] == best]
    if default in tied or len(tied) == 1:
        return default if default in tied else tied[0]
    try:
        d = csv.Sniffer().sniff("\n".join(lines[:20]), delimiters="".join(tied)).delimiter
        return d if d in tied else tied[0]
    except csv.Error:
        return tied[0]


def _read_delimited(path: Path, delimiter: str | None, typed_header: bool, strip: bool,
                    max_rows: int | None, errors: str) -> Table:
    default = "\t" if path.suffix.lower() in _TAB_EXT else "|" if path.suffix.lower() == ".psv" else ","
    old_limit = csv.field_size_limit()
    csv.field_size_limit(max(old_limit, 1 << 30))
    try:
        with _open_text(path, errors) as f:
            try:
                sample = f.read(_SAMPLE)
            except UnicodeError as exc:
                raise _decode_error(path, exc) from None
            if "\x00" in sample:
                raise UserError(f"{path}: contains NUL bytes; not a text table (a binary file, or "
                                "UTF-16 without a byte-order mark?)")
            if not sample.strip():
                raise UserError(f"{path}: empty file (expected a header row and data rows)")
            delim = delimiter or _sniff(path, sample, default)
            f.seek(0)
            reader = csv.reader(f, delimiter=delim)
            header: list[str] | None = None
            rows: list[dict] = []
            numbers: list[int] = []
            lines: list[int | None] = []
            start = 1
            try:
                for rec in reader:
                    line = start
                    start = reader.line_num + 1
                    if not rec or all(not c.strip() for c in rec):
                        continue
                    if header is None:
                        header = [c.strip() for c in rec]
                        if typed_header:
                            header = [h.split(":")[0].strip() for h in header]
                        if header and header[0].startswith("\ufeff"):
                            header[0] = header[0].lstrip("\ufeff")
                        _check_header(path, header)
                        n = len(header)
                        continue
                    k = len(numbers) + 1
                    if len(rec) > n:
                        if any(c.strip() for c in rec[n:]):
                            raise UserError(
                                f"{path}: row {k} has {len(rec)} fields; the header has {n} (a "
                                f"{_name(delim)} inside an unquoted value?) (line {line})")
                        rec = rec[:n]
                    elif len(rec) < n:
                        raise UserError(
                            f"{path}: row {k}, column {header[len(rec)]!r}: missing (the row has "
                            f"{len(rec)} field(s), the header {n}) (line {line})")
                    rows.append(dict(zip(header, (c.strip() for c in rec) if strip else rec,
                                         strict=True)))
                    numbers.append(k)
                    lines.append(line)
                    if max_rows is not None and len(rows) >= max_rows:
                        break
            except UnicodeError as exc:
                raise _decode_error(path, exc) from None
            except csv.Error as exc:
                raise UserError(f"{path}: line {reader.line_num + 1}: not valid "
                                f"{_name(delim)}-separated text ({exc})") from None
    finally:
        csv.field_size_limit(old_limit)
    if header is None:
        raise UserError(f"{path}: empty file (expected a header row and data rows)")
    return Table(path, header, rows, numbers, lines, format="csv", delimiter=delim)


def _name(delim: str) -> str:
    return {",": "comma", "\t": "tab", ";": "semicolon", "|": "pipe"}.get(delim, repr(delim))


def _read_jsonl(path: Path, strip: bool, max_rows: int | None, errors: str) -> Table:
    columns: dict[str, None] = {}
    rows: list[dict] = []
    numbers: list[int] = []
    lines: list[int | None] = []

    def pairs(kv):
        d = {}
        for k, v in kv:
            if k in d:
                raise _DuplicateKey(k)
            d[k] = v
        return d

    try:
        with _open_text(path, errors) as f:
            for line_no, text in enumerate(f, 1):
                if not text.strip():
                    continue
                k = len(rows) + 1
                where = f"{path}: row {k}"
                try:
                    obj = json.loads(text, object_pairs_hook=pairs)
                except json.JSONDecodeError as exc:
                    raise UserError(f"{where}: not JSON ({exc.msg}, column {exc.colno}) "
                                    f"(line {line_no})") from None
                except _DuplicateKey as exc:
                    raise UserError(f"{where}, column {exc.args[0]!r}: the key is given twice "
                                    f"(line {line_no})") from None
                except RecursionError:
                    raise UserError(f"{where}: JSON nested too deeply (line {line_no})") from None
                if not isinstance(obj, dict):
                    raise UserError(f"{where}: expected a JSON object {{...}}, got "
                                    f"{type(obj).__name__} (line {line_no})")
                if strip:
                    obj = {c: v.strip() if isinstance(v, str) else v for c, v in obj.items()}
                for c in obj:
                    columns.setdefault(c)
                rows.append(obj)
                numbers.append(k)
                lines.append(line_no)
                if max_rows is not None and len(rows) >= max_rows:
                    break
    except UnicodeError as exc:
        raise _decode_error(path, exc) from None
    return Table(path, list(columns), rows, numbers, lines, format="jsonl")


class _DuplicateKey(Exception):
    pass


def _read_parquet(path: Path, strip: bool) -> Table:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UserError(f"{path}: reading Parquet needs pyarrow (`pip install pyarrow`)") from None
    if path.stat().st_size == 0:
        raise UserError(f"{path}: empty file (expected a Parquet table)")
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise UserError(f"{path}: not a readable Parquet file ({exc})") from None
    names = [str(c) for c in table.column_names]
    _check_header(path, names)
    cols = []
    for j in range(table.num_columns):
        try:
            vals = table.column(j).to_pylist()
        except Exception as exc:
            raise UserError(f"{path}: column {names[j]!r}: cannot read ({exc})") from None
        if strip:
            vals = [v.strip() if isinstance(v, str) else v for v in vals]
        cols.append(vals)
    rows = [dict(zip(names, r, strict=True)) for r in zip(*cols, strict=True)] if cols else []
    n = len(rows)
    return Table(path, names, rows, list(range(1, n + 1)), [None] * n, format="parquet")
