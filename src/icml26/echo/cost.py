"""Verification knee and speculative-step cost, on top of :mod:`icml26.sim.cost`.

ECHO models the verification time of a batch as (paper, as restated in the notes)

    T_ver(K) = T_ar * (1 + gamma * [K - K_max]^+),   K = sum_i K_i,

flat while the forward is memory-bound and linear past the knee ``K_max``. :func:`fit_knee` fits
(T_ar, K_max, gamma) to measured or modelled forward times. :class:`SpecCost` prices one
speculative iteration with any :class:`~icml26.sim.cost.CostModel`: the verify forward over the
trees' sizes, plus one draft forward per draft depth over the nodes expanded at that depth.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from icml26.sim.cost import CostModel, HardwareSpec, ModelSpec, RooflineCost
from icml26.sim.gemm import GemmEfficiency, gemm_table
from icml26.sim.replica import ReplicaCost

__all__ = ["Knee", "fit_knee", "SpecCost", "gpu_spec_cost", "replica_spec_cost", "spec_from_config",
           "eagle_head_spec", "SENSITIVITY"]


@dataclass(frozen=True)
class Knee:
    """``t_ar`` seconds, ``k_max`` tokens, ``gamma`` per token (dimensionless slope / T_ar)."""

    t_ar: float
    k_max: float
    gamma: float

    def __post_init__(self):
        if not (self.t_ar > 0 and self.k_max >= 0 and self.gamma >= 0):
            raise ValueError(f"Knee needs t_ar > 0, k_max >= 0, gamma >= 0; got {self}")

    def time(self, k) -> np.ndarray:
        """T_ver(K) in seconds for K (scalar or array) verified tokens."""
        k = np.asarray(k, dtype=float)
        return self.t_ar * (1 + self.gamma * np.maximum(k - self.k_max, 0))


def fit_knee(k: Sequence[float], t: Sequence[float]) -> Knee:
    """Least-squares fit of :class:`Knee` to times ``t`` (s) at verified-token counts ``k``.

    For every candidate knee (each measured ``k`` and a fine grid between), ``t = a + b x`` with
    ``x = [k - K_max]^+`` is solved in closed form; the knee with the smallest squared error wins.
    """
    k, t = np.asarray(k, float), np.asarray(t, float)
    if k.shape != t.shape or k.size < 3:
        raise ValueError(f"need >= 3 paired (k, t) points; got {k.size} and {t.size}")
    if np.any(t <= 0):
        raise ValueError("times must be > 0")
    def solve(grid, best):
        for km in grid:
            x = np.maximum(k - km, 0)
            a_mat = np.stack([np.ones_like(x), x], 1)
            (a, b), *_ = np.linalg.lstsq(a_mat, t, rcond=None)
            if a <= 0:
                continue
            b = max(b, 0.0)
            sse = float(((a + b * x - t) ** 2).sum())
            if best is None or sse < best[0] - 1e-15 * max(1.0, sse):
                best = (sse, a, km, b / a)
        return best

    grid = np.unique(np.concatenate([k, np.linspace(k.min(), k.max(), 512)]))
    best = solve(grid, None)
    for _ in range(3):  # refine around the best knee (the optimum lies between grid points)
        if best is None:
            break
        step = float(np.diff(grid).max()) if grid.size > 1 else 1.0
        grid = np.linspace(max(k.min(), best[2] - step), min(k.max(), best[2] + step), 401)
        best = solve(grid, best)
    if best is None:
        raise ValueError("could not fit a positive T_ar")
    return Knee(float(best[1]), float(best[2]), float(best[3]))


class SpecCost:
    """Seconds of one speculative iteration under two :class:`CostModel` s.

    target : the target's cost model. draft : the draft's (one forward per draft depth).
    context : tokens already cached per request (the same for every request, in tokens).
    """

    def __init__(self, target: CostModel, draft: CostModel, context: int = 1024):
        if context < 0:
            raise ValueError(f"context must be >= 0; got {context}")
        self.target, self.draft, self.context = target, draft, context

    def ar_time(self, b: int) -> float:
        return self.target.forward_time([1] * b, [self.context] * b)

    def verify_time(self, sizes: Sequence[int]) -> float:
        return self.target.forward_time(list(sizes), [self.context] * len(sizes))

    def draft_time(self, expanded: Sequence[Sequence[int]]) -> float:
        """``expanded[i][s]``: nodes of request i run by the draft at draft step s."""
        steps = max((len(e) for e in expanded), default=0)
        total = 0.0
        for s in range(steps):
            n = [e[s] for e in expanded if len(e) > s and e[s] > 0]
            total += self.draft.forward_time(n, [self.context] * len(n))
        return total

    def knee(self, b: int, per_request=(1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64),
             totals=(64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)) -> Knee:
        """Fit the verification knee for batch size ``b``: verified-token totals ``b * r`` for
        ``r`` in ``per_request`` plus the absolute ``totals`` >= b, split evenly over requests."""
        ks, ts = [], []
        for total in sorted({int(round(r * b)) for r in per_request} | {t for t in totals if t >= b}):
            sizes = [total // b + (1 if i < total % b else 0) for i in range(b)]
            ks.append(total)
            ts.append(self.verify_time(sizes))
        return fit_knee(ks, ts)


def gpu_spec_cost(context: int = 1024, target: ModelSpec | None = None, hw: HardwareSpec | None = None,
                  draft_layers: int = 1, draft_vocab: int = 32000, draft_overhead_s: float = 2e-4) -> SpecCost:
    """The modelled GPU setting: an 8B Llama-3 target on one H100 (roofline), drafted by an
    EAGLE-3-like head: ``draft_layers`` decoder layers of the target's shape and an LM head over a
    reduced ``draft_vocab`` (EAGLE-3 uses 32k), run inside the speculative step (CUDA-graph
    launches: ``draft_overhead_s`` per draft forward)."""
    target = target or ModelSpec.llama3_8b()
    hw = hw or HardwareSpec.h100()
    dspec = ModelSpec(f"{target.name} draft ({draft_layers} layer)", draft_layers, target.hidden, target.n_heads,
                      target.n_kv_heads, target.ffn, draft_vocab, target.head_dim, target.dtype_bytes,
                      tied_embeddings=True)
    dhw = HardwareSpec(hw.name, hw.peak_flops, hw.mem_bw, hw.mem_bytes, hw.mfu, hw.mbu, draft_overhead_s, hw.link_bw)
    return SpecCost(RooflineCost(target, hw), RooflineCost(dspec, dhw), context)


def spec_from_config(cfg, name: str | None = None, dtype_bytes: float = 2.0) -> ModelSpec:
    """A :class:`ModelSpec` from an HF config (Llama / Qwen2 / Qwen3 fields)."""
    heads = cfg.num_attention_heads
    return ModelSpec(name or getattr(cfg, "_name_or_path", "") or cfg.model_type, cfg.num_hidden_layers,
                     cfg.hidden_size, heads, getattr(cfg, "num_key_value_heads", None) or heads,
                     cfg.intermediate_size, cfg.vocab_size, getattr(cfg, "head_dim", None) or cfg.hidden_size // heads,
                     dtype_bytes, bool(getattr(cfg, "tie_word_embeddings", False)))


def eagle_head_spec(target: ModelSpec, layers: int = 1, vocab: int = 32000) -> ModelSpec:
    """An EAGLE-3-like draft head: ``layers`` decoder layers of the target's shape, a ``vocab`` head."""
    return ModelSpec(f"{target.name} draft ({layers} layer)", layers, target.hidden, target.n_heads,
                     target.n_kv_heads, target.ffn, vocab, target.head_dim, target.dtype_bytes, tied_embeddings=True)


#: One-at-a-time sensitivity settings of the modelled GPU cost: GEMM/attention efficiency scaled
#: (MFU), achieved memory bandwidth fraction (MBU, default 0.7) and cached context per request.
SENSITIVITY: dict[str, dict] = {
    "nominal": {},
    "MFU x0.7": {"mfu_scale": 0.7},
    "MFU x1.15": {"mfu_scale": 1.15},
    "MBU 0.55": {"mbu": 0.55},
    "MBU 0.85": {"mbu": 0.85},
    "context 512": {"context": 512},
    "context 2048": {"context": 2048},
}


def replica_spec_cost(context: int = 1024, target: ModelSpec | None = None, draft: ModelSpec | None = None,
                      hw: HardwareSpec | None = None, *, mfu_scale: float = 1.0, mbu: float | None = None,
                      draft_overhead_s: float = 2e-4) -> SpecCost:
    """The modelled GPU setting on :class:`~icml26.sim.replica.ReplicaCost` (per-GPU GEMM efficiency):
    ``target`` (default Llama-3-8B) on one ``hw`` (default H100-SXM), drafted by ``draft`` (default an
    EAGLE-3-like 1-layer head, :func:`eagle_head_spec`; a separate draft model's own shape for a
    draft/target pair) launched inside the speculative step (CUDA graphs: ``draft_overhead_s`` per
    draft forward; the target round keeps ``hw.overhead_s``).

    mfu_scale : multiplies the GEMM-efficiency plateau (clipped to 1) and the attention efficiency.
    mbu : replaces ``hw.mbu`` (achieved fraction of memory bandwidth).
    """
    if not mfu_scale > 0:
        raise ValueError(f"mfu_scale must be > 0; got {mfu_scale}")
    target = target or ModelSpec.llama3_8b()
    hw = hw or HardwareSpec.h100()
    if mbu is not None:
        hw = dataclasses.replace(hw, mbu=mbu)
    base = gemm_table().get(hw.name, GemmEfficiency.constant(hw.mfu))
    gemm = dataclasses.replace(base, e_max=min(1.0, base.e_max * mfu_scale),
                               source=f"{base.source} x {mfu_scale}" if mfu_scale != 1 else base.source)
    attn = min(1.0, 0.5 * mfu_scale)
    dspec = draft or eagle_head_spec(target)
    return SpecCost(ReplicaCost(target, hw, gemm=gemm, attn_eff=attn),
                    ReplicaCost(dspec, hw, gemm=gemm, attn_eff=attn, overhead_s=draft_overhead_s), context)
