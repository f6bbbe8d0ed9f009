"""Requests and traces: Azure LLM inference (2023/2024), BurstGPT, the native CSV, synthetic.

A :class:`Request` is what arrives at a serving system: its arrival time (seconds from the start
of the trace), its prompt length and its *true* output length in tokens (known to the simulator,
not to the scheduler), optionally the prompt text, a type label and free ``meta`` data (e.g. a
length predictor's output for that request).

Schemas read by :func:`load_trace` (``schema="auto"`` picks by header):

- ``azure``: ``TIMESTAMP, ContextTokens, GeneratedTokens``; TIMESTAMP is a datetime with up to 7
  fractional digits (2024 edition: with a UTC offset); arrival = seconds after the first row.
- ``burstgpt``: ``Timestamp, Model, Request tokens, Response tokens, Total tokens, Log Type``;
  Timestamp is already relative seconds; rows with 0 response tokens are failed requests: dropped
  and counted (``load_trace(..., return_dropped=True)``).
- ``native``: ``id, arrival_s, prompt_tokens, output_tokens[, type][, prompt]`` (what
  :func:`write_trace` writes).

A UTF-8 byte-order mark is accepted. Rows out of time order (a merged or hand-edited file) are
sorted by arrival (``order="sort"``, the default) with a :class:`TraceOrderWarning` that names
the file, the first such row and how many there are (Python prints it once on stderr); arrivals
are measured from the *earliest* row, so none is negative. ``order="strict"`` refuses such a
file instead, with a :class:`~icml26.core.errors.UserError` naming file, row and column.
"""

from __future__ import annotations

import csv
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from icml26.core.errors import UserError
from icml26.core.io import atomic_open
from icml26.core.tables import Parser, TableOrderWarning, integer, number, read_table

__all__ = ["Request", "LengthDist", "RequestType", "TraceOrderWarning", "load_trace", "write_trace",
           "synthetic_trace"]


class TraceOrderWarning(TableOrderWarning):
    """A trace's rows were not in time order; :func:`load_trace` sorted them."""


@dataclass(frozen=True)
class Request:
    """One request. ``arrival_s`` in seconds; token counts are ints >= 1 (prompt >= 1)."""

    id: int | str
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    prompt: str | None = None
    type: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not (isinstance(self.arrival_s, (int, float)) and math.isfinite(self.arrival_s)):
            raise ValueError(f"request {self.id!r}: arrival_s must be a finite number; got {self.arrival_s!r}")
        for name in ("prompt_tokens", "output_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"request {self.id!r}: {name} must be an integer >= 1; got {v!r}")


SCHEMAS = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
    "native": ("arrival_s", "prompt_tokens", "output_tokens"),
}

_FRACTION = re.compile(r"(\.\d{6})\d+")


def _parse_datetime(text: str) -> float:
    """POSIX seconds of an Azure TIMESTAMP (7 fractional digits are cut to microseconds)."""
    t = _FRACTION.sub(r"\1", text.strip())
    dt = datetime.fromisoformat(t)
    if dt.tzinfo is None:
        return (dt - datetime(1970, 1, 1)).total_seconds()
    return dt.timestamp()


def _time_parser():
    def parse(value) -> float:
        if isinstance(value, datetime):  # a Parquet timestamp column
            return (value.timestamp() if value.tzinfo is not None
                    else (value - datetime(1970, 1, 1)).total_seconds())
        try:
            return _parse_datetime(str(value))
        except (AttributeError, TypeError, ValueError):
            raise ValueError(f"unparseable datetime {value!r}") from None

    return Parser(parse, "a datetime")


def _native_id(rid, i: int):
    if isinstance(rid, int) and not isinstance(rid, bool):
        return rid
    rid = None if rid is None else str(rid)
    return int(rid) if rid and rid.isdigit() else (rid or i - 1)


_PARSERS = {
    "azure": {"TIMESTAMP": _time_parser(), "ContextTokens": integer(1), "GeneratedTokens": integer(1)},
    "burstgpt": {"Timestamp": number(0), "Request tokens": integer(1)},
    "native": {"arrival_s": number(0), "prompt_tokens": integer(1), "output_tokens": integer(1)},
}


def load_trace(path: str | os.PathLike, schema: str = "auto", *, return_dropped: bool = False,
               limit: int | None = None, order: str = "sort"):
    """Read a trace (CSV, TSV, JSONL or Parquet; see :func:`icml26.core.tables.read_table`) into a
    list of :class:`Request` sorted by arrival (ids = row numbers - 1).

    Errors (:class:`~icml26.core.errors.UserError`) name the file, the row (1 = first data row)
    and the column: a missing column, a token count that is not an integer >= 1, an unparseable,
    negative or non-finite time, a file with no requests. ``limit`` stops after that many
    requests (in file order). With ``return_dropped`` returns ``(requests, n_dropped)`` (BurstGPT
    failures). ``order``: ``"sort"`` sorts rows that are out of time order, with a
    :class:`TraceOrderWarning`; ``"strict"`` raises instead.
    """
    path = Path(path)
    if schema not in ("auto", *SCHEMAS):
        raise UserError(f"unknown trace schema {schema!r}; use auto, {', '.join(SCHEMAS)}")
    if order not in ("sort", "strict"):
        raise UserError(f"unknown trace order {order!r}; use sort or strict")
    if limit is not None and limit < 1:
        raise UserError(f"limit must be >= 1 (requests); got {limit}")
    if not path.is_file():
        raise UserError(f"trace file not found: {path}")
    t = read_table(path, strip=False, what="requests", max_rows=limit)
    header = t.columns
    if schema == "auto":
        found = [s for s, cols in SCHEMAS.items() if all(c in header for c in cols)]
        # a header with a schema's time column and some of its others: name what is missing
        found = found or [s for s, cols in SCHEMAS.items()
                          if cols[0] in header and any(c in header for c in cols[1:])]
        if not found:
            raise UserError(
                f"{path}: unknown trace header {header}; expected Azure "
                f"({', '.join(SCHEMAS['azure'])}), BurstGPT ({', '.join(SCHEMAS['burstgpt'])}) "
                f"or native ({', '.join(SCHEMAS['native'])}) columns")
        schema = found[0]
    missing = [c for c in SCHEMAS[schema] if c not in header]
    if missing:
        raise UserError(f"{path}: missing column(s) {missing} for schema {schema!r}; header is {header}")
    time_col = SCHEMAS[schema][0]
    dropped = 0
    if schema == "burstgpt":
        if limit is not None and len(t) == limit:  # failed rows do not count: read them all
            t = read_table(path, strip=False, what="requests")
        t.parse("Response tokens", integer(0))
        ok = [r["Response tokens"] != 0 for r in t.rows]
        dropped = len(ok) - sum(ok)
        t.keep(ok)
        if not t.rows:
            raise UserError(f"{path}: no requests: all {dropped} rows have 0 response tokens "
                            "(failed requests)")
        if limit is not None:
            t.head(limit)
    shown = {i: r[time_col] for i, r in enumerate(t.rows)}
    for col, parser in _PARSERS[schema].items():
        t.parse(col, parser)
    t.sort_by(time_col, "refuse" if order == "strict" else "sort", what="time order",
              warning=TraceOrderWarning, shown=shown, hint="order='sort'")
    times = [r[time_col] for r in t.rows]
    # Azure times are absolute: measure from the earliest row (the first one once sorted)
    t0 = times[0] if schema == "azure" else 0.0
    out = []
    for r, i, tm in zip(t.rows, t.row_numbers, times, strict=True):
        if schema == "azure":
            req = Request(i - 1, tm - t0, r["ContextTokens"], r["GeneratedTokens"])
        elif schema == "burstgpt":
            req = Request(i - 1, tm, r["Request tokens"], r["Response tokens"],
                          type=_opt_text(r.get("Model")))
        else:
            req = Request(_native_id(r.get("id"), i), tm, r["prompt_tokens"], r["output_tokens"],
                          prompt=_opt_text(r.get("prompt")), type=_opt_text(r.get("type")))
        out.append(req)
    return (out, dropped) if return_dropped else out


def _opt_text(v) -> str | None:
    return None if v is None or v == "" else str(v)


def write_trace(path: str | os.PathLike, requests: Sequence[Request], schema: str = "native") -> Path:
    """Write requests as CSV (atomically). ``schema``: native (default, keeps type and prompt),
    azure (TIMESTAMP as a datetime from 2023-11-16 00:00:00) or burstgpt."""
    rows: list[list]
    if schema == "native":
        header = ["id", "arrival_s", "prompt_tokens", "output_tokens", "type", "prompt"]
        rows = [[r.id, repr(float(r.arrival_s)), r.prompt_tokens, r.output_tokens, r.type or "", r.prompt or ""]
                for r in requests]
    elif schema == "azure":
        base = datetime(2023, 11, 16).timestamp()
        header = list(SCHEMAS["azure"])
        rows = [[datetime.fromtimestamp(base + r.arrival_s).strftime("%Y-%m-%d %H:%M:%S.%f") + "0",
                 r.prompt_tokens, r.output_tokens] for r in requests]
    elif schema == "burstgpt":
        header = ["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"]
        rows = [[repr(float(r.arrival_s)), r.type or "ChatGPT", r.prompt_tokens, r.output_tokens,
                 r.prompt_tokens + r.output_tokens, "Conversation log"] for r in requests]
    else:
        raise UserError(f"unknown trace schema {schema!r}; use native, azure or burstgpt")
    with atomic_open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return Path(path)


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution: ``kind`` in ``lognormal`` | ``logt`` | ``const``.

    ``ln L = mu + sigma * Z`` with Z standard normal (lognormal) or Student-t with ``nu`` degrees
    of freedom (logt); rounded up, clipped to ``[lo, hi]``. ``const`` gives ``round(exp(mu))``.
    """

    kind: str = "lognormal"
    mu: float = 5.0
    sigma: float = 1.0
    nu: float = 3.5
    lo: int = 1
    hi: int = 4096

    def __post_init__(self) -> None:
        if self.kind not in ("lognormal", "logt", "const"):
            raise ValueError(f"kind must be lognormal, logt or const; got {self.kind!r}")
        if not self.sigma > 0:
            raise ValueError(f"sigma must be > 0; got {self.sigma}")
        if not self.nu > 1:
            raise ValueError(f"nu must be > 1; got {self.nu}")
        if not 1 <= self.lo <= self.hi:
            raise ValueError(f"need 1 <= lo <= hi; got lo={self.lo}, hi={self.hi}")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` int64 lengths in ``[lo, hi]``."""
        if self.kind == "const":
            return np.full(n, min(max(round(math.exp(self.mu)), self.lo), self.hi), dtype=np.int64)
        z = rng.standard_normal(n) if self.kind == "lognormal" else rng.standard_t(self.nu, n)
        x = np.exp(np.clip(self.mu + self.sigma * z, -50, 50))
        return np.clip(np.ceil(x), self.lo, self.hi).astype(np.int64)


@dataclass(frozen=True)
class RequestType:
    """A request class in a mix: a name, a weight, and its input/output length distributions."""

    name: str
    weight: float
    inputs: LengthDist
    outputs: LengthDist


def synthetic_trace(n: int, rate: float, burstiness: float = 1.0,
                    inputs: LengthDist = LengthDist("lognormal", 6.0, 0.8, hi=4096),
                    outputs: LengthDist = LengthDist("logt", 5.0, 0.8, 3.5, hi=2048),
                    mix: Sequence[RequestType] | None = None, seed: int = 0,
                    diurnal_period_s: float | None = None, diurnal_amplitude: float = 0.0) -> list[Request]:
    """``n`` requests arriving at ``rate`` req/s on average.

    Gaps are Gamma(shape=burstiness, scale=1/(rate*burstiness)) as in ``vllm bench serve
    --burstiness`` (1 = Poisson; < 1 burstier). With ``mix``, each request's type is drawn by
    weight; with a diurnal period, type i's weight is scaled by
    ``1 + A*sin(2*pi*t/P + 2*pi*i/k)`` (a rotating mix over time).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1; got {n}")
    if not rate > 0:
        raise ValueError(f"rate must be > 0 (requests per second); got {rate}")
    if not burstiness > 0:
        raise ValueError(f"burstiness must be > 0; got {burstiness}")
    if not 0 <= diurnal_amplitude <= 1:
        raise ValueError(f"diurnal_amplitude must be in [0, 1]; got {diurnal_amplitude}")
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.gamma(burstiness, 1.0 / (rate * burstiness), n))
    if not mix:
        ins, outs = inputs.sample(rng, n), outputs.sample(rng, n)
        return [Request(i, float(t[i]), int(ins[i]), int(outs[i])) for i in range(n)]
    w = np.array([m.weight for m in mix], dtype=float)
    if (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"mix weights must be >= 0 with a positive sum; got {w.tolist()}")
    W = np.broadcast_to(w, (n, len(mix))).copy()
    if diurnal_period_s:
        phase = 2 * np.pi * (t[:, None] / diurnal_period_s + np.arange(len(mix))[None] / len(mix))
        W *= 1 + diurnal_amplitude * np.sin(phase)
    W /= W.sum(1, keepdims=True)
    kinds = (W.cumsum(1) < rng.random(n)[:, None]).sum(1)
    out = []
    for i in range(n):
        m = mix[kinds[i]]
        out.append(Request(i, float(t[i]), int(m.inputs.sample(rng, 1)[0]), int(m.outputs.sample(rng, 1)[0]),
                           type=m.name))
    return out
