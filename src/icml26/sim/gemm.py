"""Per-GPU GEMM efficiency: the fraction of a GPU's dense peak that one matmul reaches.

A ``(M, K) x (K, N)`` GEMM does ``2 M N K`` FLOPs. Its achieved rate falls when the per-GPU
problem is small: few output tiles leave SMs idle (wave quantization), skinny ``M`` wastes tile
rows (tile quantization), short ``K`` leaves each tile's pipeline prologue and epilogue
unamortised. :class:`GemmEfficiency` is a smooth envelope of those effects,

    eff(M, N, K) = e_max * M / (M + m_half) * W / (W + mn_half) * K / (K + k_half),
    W = (M + m_tile) N,

which is <= e_max <= 1 and non-decreasing in each of M, N, K (every factor is). ``W`` counts the
output elements of the tiles launched: a GEMM with ``M`` below one tile height still launches a
row of tiles across ``N`` (``m_tile = 64``, Hopper's wgmma height), so the wave factor does not
vanish as ``M -> 0``; the small-``M`` loss is the tile-quantization factor alone, which makes the
compute time of a skinny GEMM flat in ``M`` (and far below its weight-read time: memory-bound). Tensor
parallelism enters through the arguments: a column-parallel layer runs ``(M, N/tp, K)``, a
row-parallel one ``(M, N, K/tp)``, so the same model on more GPUs runs each GEMM less efficiently.

Where it comes from: :meth:`GemmEfficiency.for_gpu` reads ``sim/data/gemm_bf16.json`` (H100-SXM,
H200, A100-SXM): ``e_max`` is solved so the envelope reproduces a published measured
maximum-achievable matmul rate at its best shape, and the half-sizes are inferred from the tile
and wave mechanism (marked [I] in the file and in docs/sim.md). A measured profile replaces it:
:meth:`GemmEfficiency.from_profile` fits the four numbers to a CSV of ``M, N, K`` and ``seconds``
or ``tflops`` rows.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from icml26.core.errors import UserError

__all__ = ["GemmEfficiency", "gemm_table", "MIN_PROFILE_ROWS", "M_TILE"]

#: rows of one output tile in the wave factor (Hopper wgmma m64; also a common Ampere tile height)
M_TILE = 64.0

#: a profile fit has 4 parameters; fewer rows than this cannot pin them down
MIN_PROFILE_ROWS = 8

_TABLE = Path(__file__).with_name("data") / "gemm_bf16.json"


@dataclass(frozen=True)
class GemmEfficiency:
    """``eff(M, N, K)`` in (0, 1]: achieved / peak dense FLOP/s of one GEMM on one GPU.

    e_max : the large-GEMM plateau, in (0, 1].
    m_half : rows (tokens) at which the tile-quantization factor is 1/2; 0 turns it off.
    mn_half : launched output elements ``(M + 64) N`` at which the wave factor is 1/2; 0 turns it off.
    k_half : reduction depth at which the K factor is 1/2; 0 turns it off.
    source : where the numbers come from (free text).

    With all three halves 0 it is a constant efficiency ``e_max`` (the old roofline's ``mfu``).
    """

    e_max: float
    m_half: float = 0.0
    mn_half: float = 0.0
    k_half: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.e_max) and 0 < self.e_max <= 1):
            raise ValueError(f"GemmEfficiency.e_max must be in (0, 1]; got {self.e_max}")
        for f in ("m_half", "mn_half", "k_half"):
            v = getattr(self, f)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"GemmEfficiency.{f} must be finite and >= 0; got {v}")

    def __call__(self, m: float, n: float, k: float) -> float:
        """Efficiency of one ``(m, k) x (k, n)`` GEMM (dimensions > 0; fractional ones allowed)."""
        w = (m + M_TILE) * n
        return (self.e_max * (m / (m + self.m_half)) * (w / (w + self.mn_half))
                * (k / (k + self.k_half)))

    def seconds(self, m: float, n: float, k: float, peak_flops: float) -> float:
        """Compute time (s) of the GEMM at ``peak_flops`` (FLOP/s) times its efficiency."""
        return 2.0 * m * n * k / (peak_flops * self(m, n, k))

    @classmethod
    def constant(cls, eff: float) -> GemmEfficiency:
        return cls(eff, source=f"constant {eff}")

    # ---- the shipped table
    @classmethod
    def for_gpu(cls, name: str) -> GemmEfficiency:
        """The shipped calibration for GPU ``name`` (a :class:`~icml26.sim.cost.HardwareSpec`
        name such as ``"H100-SXM"``); KeyError listing the known names otherwise."""
        table = gemm_table()
        if name not in table:
            raise KeyError(f"no GEMM calibration for {name!r}; have {', '.join(sorted(table))}")
        return table[name]

    # ---- measured profiles
    @classmethod
    def fit(cls, shapes: Sequence[tuple[float, float, float]], eff: Sequence[float],
            source: str = "fit") -> GemmEfficiency:
        """Least squares in log efficiency over ``shapes`` ``[(M, N, K), ...]`` and measured
        efficiencies ``eff`` (each in (0, 1]); at least :data:`MIN_PROFILE_ROWS` points."""
        from scipy.optimize import least_squares

        x = np.asarray(shapes, dtype=float).reshape(-1, 3)
        y = np.log(np.asarray(eff, dtype=float))
        if len(x) < MIN_PROFILE_ROWS:
            raise UserError(f"{source}: a GEMM-efficiency fit has 4 parameters and needs at least "
                            f"{MIN_PROFILE_ROWS} rows; got {len(x)}")
        m, n, k = x[:, 0], x[:, 1], x[:, 2]
        mn = (m + M_TILE) * n

        def resid(p):  # p = (log e_max, log1p halves...)
            e, mh, mnh, kh = p[0], np.expm1(p[1]), np.expm1(p[2]), np.expm1(p[3])
            return e + np.log(m / (m + mh)) + np.log(mn / (mn + mnh)) + np.log(k / (k + kh)) - y

        p0 = [min(float(y.max()), 0.0), math.log1p(16.0), math.log1p(float(np.median(mn)) / 10), math.log1p(64.0)]
        hi = [0.0, math.log1p(float(m.max()) * 10), math.log1p(float(mn.max()) * 10), math.log1p(float(k.max()) * 10)]
        p0 = [min(max(v, -20.0 if i == 0 else 0.0), hi[i]) for i, v in enumerate(p0)]
        res = least_squares(resid, p0, bounds=([-20.0, 0.0, 0.0, 0.0], hi))
        e, mh, mnh, kh = res.x
        return cls(float(min(math.exp(e), 1.0)), float(np.expm1(mh)), float(np.expm1(mnh)),
                   float(np.expm1(kh)), source=source)

    @classmethod
    def from_profile(cls, profile: str | os.PathLike | Sequence[Mapping[str, object]],
                     peak_flops: float) -> GemmEfficiency:
        """Fit to measured GEMMs: a CSV path (or a list of dicts) with columns ``M, N, K`` and
        ``seconds`` (wall time of one GEMM) or ``tflops`` (achieved TFLOP/s); ``peak_flops`` is
        the GPU's dense peak in FLOP/s. Errors name the file, the row and the field."""
        if not (isinstance(peak_flops, (int, float)) and peak_flops > 0):
            raise ValueError(f"peak_flops must be > 0 FLOP/s; got {peak_flops!r}")
        src, rows = "profile", profile
        if isinstance(profile, (str, os.PathLike)):
            path = Path(profile)
            src = str(path)
            if not path.is_file():
                raise UserError(f"GEMM profile not found: {path}")
            with path.open(newline="", encoding="utf-8-sig") as f:
                reader = csv.DictReader(f)
                header = [h.strip() for h in (reader.fieldnames or [])]
                rows = [{(k or "").strip(): v for k, v in r.items()} for r in reader]
            _check_header(header, src)
        elif rows and isinstance(rows[0], Mapping):
            _check_header(list(rows[0].keys()), src)
        shapes, eff = [], []
        for i, r in enumerate(rows, start=1):  # data rows, 1-based (line i + 1 of a CSV with a header)
            m, n, k = (_positive(r, f, src, i) for f in ("M", "N", "K"))
            flops = 2.0 * m * n * k
            if r.get("seconds") not in (None, ""):
                rate = flops / _positive(r, "seconds", src, i)
            else:
                rate = _positive(r, "tflops", src, i) * 1e12
            e = rate / peak_flops
            if e > 1.0:
                raise UserError(f"{src} row {i}: {rate / 1e12:.1f} TFLOP/s exceeds the peak "
                                f"{peak_flops / 1e12:.1f} TFLOP/s (wrong peak, or seconds/tflops in the wrong unit?)")
            shapes.append((m, n, k))
            eff.append(e)
        return cls.fit(shapes, eff, source=src)


def _check_header(header: list[str], src: str) -> None:
    missing = [c for c in ("M", "N", "K") if c not in header]
    if missing or not ({"seconds", "tflops"} & set(header)):
        raise UserError(f"{src}: a GEMM profile needs columns M, N, K and seconds or tflops; "
                        f"got {', '.join(header) or 'no header'}")


def _positive(row: Mapping[str, object], field: str, src: str, i: int) -> float:
    raw = row.get(field)
    try:
        v = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise UserError(f"{src} row {i}, field {field!r}: expected a number; got {raw!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise UserError(f"{src} row {i}, field {field!r}: must be > 0; got {raw!r}")
    return v


@cache
def gemm_table() -> dict[str, GemmEfficiency]:
    """``{gpu name: GemmEfficiency}`` from the shipped ``data/gemm_bf16.json``; ``e_max`` solved
    so that ``eff(anchor shape) == anchor tflops / peak``."""
    raw = json.loads(_TABLE.read_text(encoding="utf-8"))
    out = {}
    for name, g in raw["gpus"].items():
        a = g["anchor"]
        shape = GemmEfficiency(1.0, g["m_half"], g["mn_half"], g["k_half"])
        measured = a["tflops"] / g["peak_tflops"]
        e_max = min(measured / shape(a["M"], a["N"], a["K"]), 1.0)
        out[name] = GemmEfficiency(e_max, g["m_half"], g["mn_half"], g["k_half"], source=a["source"])
    return out
