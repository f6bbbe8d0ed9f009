"""Per-iteration cost models of a transformer serving engine.

A cost model answers one question: how long does one engine iteration (one forward pass over a
batch) take? Both models here implement

- ``forward_time(new_tokens, contexts) -> seconds``: sequence i processes ``new_tokens[i]`` new
  tokens on top of ``contexts[i]`` tokens already in its KV cache (a decode step is 1 new token; a
  prefill chunk is many; speculative verification is K+1);
- ``iteration_time(prefill_chunks, decode_contexts)``: the same, with prefill chunks given as
  ``(chunk_tokens, tokens_already_cached)`` pairs and decodes as their context lengths;
- ``decode_run_time(contexts, k)``: the *sum* of ``k`` consecutive decode-only iterations where every
  context grows by one token per iteration (lets the engine skip ahead in closed form).

:class:`RooflineCost` derives times from a :class:`ModelSpec` and a :class:`HardwareSpec`:
``max(FLOPs / (peak * mfu), bytes / (bandwidth * mbu)) + overhead`` per iteration, with weights
read once per iteration and each sequence's KV read once; a constant MFU and perfect TP/PP
scaling (kept for backward compatibility: its ``pp`` prices *one* stage). The layout-aware model
(per-GPU GEMM efficiency, alpha-beta collectives, pipeline rounds) is
:class:`icml26.sim.replica.ReplicaCost`. :class:`LinearCost` is ``a + b_new * sum(new) + b_seq *
n_seqs + c_ctx * sum(context + new) + d_attn * sum(attention pairs)``, fitted by least squares to
a measured profile (CSV with columns ``new_tokens, num_seqs, context_tokens, time_s`` and,
optionally, ``attn_tokens``).
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from icml26.core.errors import UserError

__all__ = ["ModelSpec", "HardwareSpec", "CostModel", "RooflineCost", "LinearCost"]


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer's shape. ``dtype_bytes``: bytes per weight / KV element."""

    name: str
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    ffn: int
    vocab: int
    head_dim: int | None = None
    dtype_bytes: float = 2.0
    tied_embeddings: bool = False

    def __post_init__(self) -> None:
        for f in ("n_layers", "hidden", "n_heads", "n_kv_heads", "ffn", "vocab"):
            if getattr(self, f) < 1:
                raise ValueError(f"ModelSpec.{f} must be >= 1; got {getattr(self, f)}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden // self.n_heads

    @property
    def params_per_layer(self) -> int:
        q_o = 2 * self.hidden * self.n_heads * self.hd
        kv = 2 * self.hidden * self.n_kv_heads * self.hd
        return q_o + kv + 3 * self.hidden * self.ffn

    @property
    def n_params(self) -> int:
        emb = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.n_layers * self.params_per_layer + emb

    @property
    def linear_flops_per_token(self) -> float:
        """2 x (parameters touched per token): every layer's matmuls plus the LM head."""
        return 2.0 * (self.n_layers * self.params_per_layer + self.vocab * self.hidden)

    @property
    def kv_bytes_per_token(self) -> float:
        return 2.0 * self.n_layers * self.n_kv_heads * self.hd * self.dtype_bytes

    @classmethod
    def from_hf_config(cls, config, name: str | None = None, dtype_bytes: float = 2.0) -> ModelSpec:
        """From a transformers ``PretrainedConfig``, a dict, or a path to ``config.json``."""
        if isinstance(config, (str, os.PathLike)):
            p = Path(config)
            p = p / "config.json" if p.is_dir() else p
            if not p.is_file():
                raise UserError(f"no config.json at {p}")
            config = json.loads(p.read_text(encoding="utf-8"))
        get = config.get if isinstance(config, Mapping) else (lambda k, d=None: getattr(config, k, d))
        try:
            heads = int(get("num_attention_heads"))
            return cls(
                name=name or str(get("_name_or_path", None) or get("model_type", "model")),
                n_layers=int(get("num_hidden_layers")), hidden=int(get("hidden_size")), n_heads=heads,
                n_kv_heads=int(get("num_key_value_heads", None) or heads),
                ffn=int(get("intermediate_size")), vocab=int(get("vocab_size")),
                head_dim=get("head_dim", None), dtype_bytes=dtype_bytes,
                tied_embeddings=bool(get("tie_word_embeddings", False)))
        except (TypeError, KeyError) as exc:
            raise UserError(f"config lacks a field a ModelSpec needs: {exc}") from None

    @classmethod
    def llama3_8b(cls) -> ModelSpec:
        return cls("Llama-3-8B", 32, 4096, 32, 8, 14336, 128256)

    @classmethod
    def llama3_70b(cls) -> ModelSpec:
        return cls("Llama-3-70B", 80, 8192, 64, 8, 28672, 128256)


@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator. ``peak_flops`` (dense, the serving dtype), ``mem_bw`` bytes/s,
    ``mem_bytes`` capacity; ``mfu`` / ``mbu`` the achieved fractions; ``overhead_s`` a fixed
    per-iteration cost (scheduler, kernel launches, sampling)."""

    name: str
    peak_flops: float
    mem_bw: float
    mem_bytes: float
    mfu: float = 0.5
    mbu: float = 0.7
    overhead_s: float = 0.004
    link_bw: float = 300e9

    def __post_init__(self) -> None:
        for f in ("peak_flops", "mem_bw", "mem_bytes", "link_bw"):
            if not getattr(self, f) > 0:
                raise ValueError(f"HardwareSpec.{f} must be > 0; got {getattr(self, f)}")
        for f in ("mfu", "mbu"):
            if not 0 < getattr(self, f) <= 1:
                raise ValueError(f"HardwareSpec.{f} must be in (0, 1]; got {getattr(self, f)}")

    @classmethod
    def h100(cls) -> HardwareSpec:
        return cls("H100-SXM", 989e12, 3.35e12, 80e9)

    @classmethod
    def h200(cls) -> HardwareSpec:
        return cls("H200", 989e12, 4.8e12, 141e9)

    @classmethod
    def cpu_2core(cls) -> HardwareSpec:
        """The 2-core reference CPU (about 68 GFLOP/s measured numpy fp32 GEMM)."""
        return cls("CPU-2core", 68e9, 20e9, 24e9, mfu=1.0, mbu=1.0, overhead_s=0.001)


class CostModel:
    """What the engine asks of a cost model: seconds for one forward over a batch.

    Subclasses define :meth:`forward_time` and :meth:`decode_run_time`; an engine iteration
    (chunked prefill plus one token per decoding sequence) is a forward with those shapes.
    """

    def forward_time(self, new_tokens: Sequence[int], contexts: Sequence[int]) -> float:
        raise NotImplementedError

    def decode_run_time(self, contexts: Sequence[int], k: int) -> float:
        raise NotImplementedError

    def iteration_time(self, prefill_chunks: Sequence[tuple[int, int]] = (),
                       decode_contexts: Sequence[int] = ()) -> float:
        """One engine step: ``prefill_chunks`` as (new tokens, tokens already cached) pairs,
        plus one new token for each decoding sequence with the given context."""
        new = [int(a) for a, _ in prefill_chunks] + [1] * len(decode_contexts)
        ctx = [int(b) for _, b in prefill_chunks] + [int(c) for c in decode_contexts]
        return self.forward_time(new, ctx)


class RooflineCost(CostModel):
    """Roofline iteration times of ``model`` on ``tp x pp`` copies of ``hw`` (the legacy model).

    Tensor parallelism divides FLOPs and bytes by ``tp`` and adds two all-reduces of the batch's
    activations per layer (bytes only, no latency); pipeline parallelism divides them by ``pp``
    (one stage's time, so ``pp > 1`` would *lower* a lone request's latency: use it only as a
    stage cost, as ``oserve.capacity.PipelineCost`` does) and adds ``pp - 1`` transfers.
    For layouts use :class:`icml26.sim.replica.ReplicaCost`, which prices whole pipeline rounds.
    """

    def __init__(self, model: ModelSpec, hw: HardwareSpec, tp: int = 1, pp: int = 1,
                 gpu_memory_utilization: float = 0.9):
        if tp < 1 or pp < 1:
            raise ValueError(f"tp and pp must be >= 1; got tp={tp}, pp={pp}")
        if not 0 < gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1]; got {gpu_memory_utilization}")
        self.model, self.hw, self.tp, self.pp = model, hw, tp, pp
        self.gpu_memory_utilization = gpu_memory_utilization
        n = tp * pp
        m = model
        self._flop_rate = hw.peak_flops * hw.mfu * n
        self._byte_rate = hw.mem_bw * hw.mbu * n
        self._weight_bytes = m.n_params * m.dtype_bytes
        # attention FLOPs per (query token x context token): QK^T and AV over all heads and layers
        self._attn_flops = 4.0 * m.n_layers * m.n_heads * m.hd
        self._comm_per_token = (0.0 if tp == 1 else 2 * m.n_layers * 2 * m.hidden * m.dtype_bytes * (tp - 1) / tp
                                / hw.link_bw) + (pp - 1) * m.hidden * m.dtype_bytes / hw.link_bw

    def kv_capacity_tokens(self) -> int:
        """KV tokens that fit beside the weights in ``gpu_memory_utilization`` of memory."""
        free = self.hw.mem_bytes * self.tp * self.pp * self.gpu_memory_utilization - self._weight_bytes
        if free <= 0:
            raise UserError(f"{self.model.name} does not fit on {self.tp * self.pp} x {self.hw.name}")
        return int(free // self.model.kv_bytes_per_token)

    def _parts(self, n_new: float, sum_ctx_new: float, sum_kv: float) -> tuple[float, float]:
        """(compute seconds, memory seconds) for a batch with ``n_new`` new tokens, sum over new
        tokens of their attended context ``sum_ctx_new`` and ``sum_kv`` cached tokens read."""
        flops = self.model.linear_flops_per_token * n_new + self._attn_flops * sum_ctx_new
        byts = self._weight_bytes + self.model.kv_bytes_per_token * sum_kv
        return flops / self._flop_rate, byts / self._byte_rate

    def forward_time(self, new_tokens: Sequence[int], contexts: Sequence[int]) -> float:
        if len(new_tokens) == 0:
            return 0.0
        n = np.asarray(new_tokens, dtype=float)
        c = np.asarray(contexts, dtype=float)
        comp, mem = self._parts(n.sum(), float((n * c + n * (n + 1) / 2).sum()), float((c + n).sum()))
        return max(comp, mem) + self.hw.overhead_s + self._comm_per_token * n.sum()

    def decode_run_time(self, contexts: Sequence[int], k: int) -> float:
        """Exact sum of ``k`` decode iterations, contexts growing by 1 each (closed form)."""
        if k <= 0 or len(contexts) == 0:
            return 0.0
        b, s = len(contexts), float(np.sum(contexts))
        # iteration j (0-based): sum_ctx_new = s + b*(j+1), sum_kv = s + b*(j+1)
        c0, m0 = self._parts(b, s + b, s + b)
        c1, m1 = self._parts(b, s + 2 * b, s + 2 * b)
        dc, dm = c1 - c0, m1 - m0  # per-iteration increments (both affine in j)
        fixed = self.hw.overhead_s + self._comm_per_token * b
        return _sum_max_affine(c0, dc, m0, dm, k) + k * fixed


def _sum_max_affine(a0: float, da: float, b0: float, db: float, k: int) -> float:
    """sum_{j=0}^{k-1} max(a0 + da*j, b0 + db*j), exactly (split at the crossing)."""
    def s(x0, dx, lo, hi):  # sum over j in [lo, hi)
        n = hi - lo
        return n * x0 + dx * (hi * (hi - 1) - lo * (lo - 1)) / 2 if n > 0 else 0.0
    if da == db:
        return s(max(a0, b0), da, 0, k)
    cross = (b0 - a0) / (da - db)  # a >= b for j >= cross when da > db
    j = min(max(int(math.ceil(cross)), 0), k)
    if da > db:
        return s(b0, db, 0, j) + s(a0, da, j, k)
    return s(a0, da, 0, j) + s(b0, db, j, k)


@dataclass(frozen=True)
class LinearCost(CostModel):
    """``t = a + b_new * sum(new) + b_seq * n_seqs + c_ctx * sum(context + new)
    + d_attn * sum(attention pairs)`` seconds.

    A sequence with ``n`` new tokens on ``c`` cached ones attends ``n c + n (n + 1) / 2``
    (query, key) pairs: the quadratic prefill-attention term. For decodes (``n = 1``) it is
    ``c + 1``, the same as the context term, so a decode-only profile cannot separate them.
    """

    a: float
    b_new: float
    b_seq: float = 0.0
    c_ctx: float = 0.0
    d_attn: float = 0.0

    def __post_init__(self) -> None:
        for f in ("a", "b_new", "b_seq", "c_ctx", "d_attn"):
            v = getattr(self, f)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"LinearCost.{f} must be finite and >= 0; got {v}")

    def forward_time(self, new_tokens: Sequence[int], contexts: Sequence[int]) -> float:
        if len(new_tokens) == 0:
            return 0.0
        nv = np.asarray(new_tokens, dtype=float)
        cv = np.asarray(contexts, dtype=float)
        n, c = float(nv.sum()), float(cv.sum())
        t = self.a + self.b_new * n + self.b_seq * len(new_tokens) + self.c_ctx * (c + n)
        if self.d_attn:
            t += self.d_attn * float((nv * cv + nv * (nv + 1) / 2).sum())
        return t

    def decode_run_time(self, contexts: Sequence[int], k: int) -> float:
        if k <= 0 or len(contexts) == 0:
            return 0.0
        b, s = len(contexts), float(np.sum(contexts))
        per = self.a + (self.b_new + self.b_seq) * b
        # decode: context term and attention term both sum (c + 1) over sequences
        return k * per + (self.c_ctx + self.d_attn) * (k * (s + b) + b * k * (k - 1) / 2)

    @classmethod
    def fit(cls, profile: str | os.PathLike | Sequence[Mapping[str, float]]) -> LinearCost:
        """Non-negative least squares on rows with ``new_tokens, num_seqs, context_tokens, time_s``
        (a CSV path or a list of dicts); ``context_tokens`` counts cached tokens before the step.

        An optional ``attn_tokens`` column (sum over the step's sequences of ``n c + n (n+1)/2``)
        fits ``d_attn`` too; then every row needs it (a single-sequence row without it is
        computed from its other columns). Without the column ``d_attn`` is 0.
        """
        from scipy.optimize import nnls

        rows = profile
        src = "profile"
        if isinstance(profile, (str, os.PathLike)):
            path = Path(profile)
            src = f"profile {path}"
            if not path.is_file():
                raise UserError(f"profile file not found: {path}")
            with path.open(newline="", encoding="utf-8-sig") as f:
                rows = list(csv.DictReader(f))
        need = ("new_tokens", "num_seqs", "context_tokens", "time_s")
        with_attn = any(r.get("attn_tokens") not in (None, "") for r in rows)
        X, y = [], []
        for i, r in enumerate(rows, start=1):
            try:
                n, b, c, t = (float(r[k]) for k in need)
            except (KeyError, TypeError, ValueError):
                raise UserError(f"{src} row {i}: need numeric columns {', '.join(need)}; got {dict(r)}") from None
            x = [1.0, n, b, c + n]
            if with_attn:
                raw = r.get("attn_tokens")
                if raw in (None, ""):
                    if b != 1:
                        raise UserError(f"{src} row {i}, field 'attn_tokens': missing, and it cannot be "
                                        f"derived for num_seqs={b:g} (other rows have it)")
                    att = n * c + n * (n + 1) / 2
                else:
                    try:
                        att = float(raw)
                    except (TypeError, ValueError):
                        raise UserError(f"{src} row {i}, field 'attn_tokens': expected a number; got {raw!r}") from None
                x.append(att)
            X.append(x)
            y.append(t)
        k = 5 if with_attn else 4
        if len(X) < k:
            raise UserError(f"{src} needs at least {k} rows to fit {k} coefficients; got {len(X)}")
        X, y = np.array(X), np.array(y)
        scale = X.max(0)
        scale[scale == 0] = 1.0
        coef, _ = nnls(X / scale, y)
        coef = coef / scale
        return cls(*(float(v) for v in coef))
