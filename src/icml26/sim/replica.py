"""The iteration cost of one serving replica on ``tp x pp`` GPUs — the sim's one cost model for
layouts (TIE, OServe and ECHO price engines with it).

One engine step is one *round*: every scheduled sequence advances once. For ``pp = 1`` a round is
one forward. For ``pp > 1`` the scheduled sequences are split into ``G = min(pp, n_seqs)``
micro-batches that flow through the ``pp`` stages one after another (vLLM's PP keeps ``pp``
batches in flight); a stage works on one micro-batch at a time, so with stage times ``s_g``

    round = max(sum_g s_g, pp * max_g s_g) + (pp - 1) * p2p + overhead,

the first term when the pipeline is full, the second when it has a bubble (fewer or unequal
micro-batches: one sequence alone pays all ``pp`` stages). A stage holds ``n_layers / pp`` layers,
re-reads its weights for every micro-batch, and its GEMMs have the same per-GPU shapes as with
``pp = 1``, so PP never lowers a single request's latency; it buys KV capacity and throughput.

One stage on one micro-batch (``T`` new tokens, ``S`` sequences, attention work ``A`` query x
context pairs, ``R`` KV tokens read), per GPU::

    compute = L_s * sum_gemms 2 T N K / (peak * eff(T, N, K))          # eff: sim.gemm
            + 2 S (V/tp) d / (peak * eff(S, V/tp, d)) / pp                # LM head, one row per sequence
            + 4 L_s (H/tp) d_h A / (peak * attn_eff)
    memory  = weight bytes of the stage + KV bytes per token * R
    stage   = max(compute, memory / (mem_bw * mbu)) + 2 L_s all_reduce(T d bytes)

with ``all_reduce(b) = alpha(tp) + 2 (tp-1)/tp * b / busbw`` and ``alpha(tp) = ar_alpha_s +
2 (tp-1) ar_step_s`` (a ring all-reduce takes 2(tp-1) steps): :class:`Interconnect`. Per-GPU
GEMMs: QKV ``(T, (H + 2 ceil(KV/tp)) d_h ... /tp, d)``, O ``(T, d, H d_h / tp)``, gate+up ``(T, 2F/tp,
d)``, down ``(T, d, F/tp)``; KV heads are replicated when ``tp > n_kv_heads`` (as vLLM does).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from icml26.core.errors import UserError
from icml26.sim.cost import CostModel, HardwareSpec, ModelSpec, _sum_max_affine
from icml26.sim.engine import EngineConfig
from icml26.sim.gemm import GemmEfficiency, gemm_table

__all__ = ["Interconnect", "ReplicaCost"]


@dataclass(frozen=True)
class Interconnect:
    """alpha-beta costs of the collectives a replica runs (seconds, bytes/s).

    ar_alpha_s : fixed latency of one all-reduce (launch + sync) [I].
    ar_step_s : latency per ring step; a ring over ``tp`` GPUs takes ``2 (tp-1)`` steps [I].
        Defaults give 9 / 15 / 27 us at tp 2 / 4 / 8.
    ar_busbw : all-reduce bus bandwidth (nccl-tests ``busbw``), bytes/s; ~366 GB/s was measured
        on 4 x H100 NVLink (see docs/sim.md).
    p2p_alpha_s, p2p_bw : one stage-to-stage activation send (NVLink inside a node; pass a
        network's figures for stages on different nodes).
    """

    ar_alpha_s: float = 6e-6
    ar_step_s: float = 1.5e-6
    ar_busbw: float = 360e9
    p2p_alpha_s: float = 10e-6
    p2p_bw: float = 360e9

    def __post_init__(self) -> None:
        for f in ("ar_alpha_s", "ar_step_s", "p2p_alpha_s"):
            if not (math.isfinite(getattr(self, f)) and getattr(self, f) >= 0):
                raise ValueError(f"Interconnect.{f} must be finite and >= 0; got {getattr(self, f)}")
        for f in ("ar_busbw", "p2p_bw"):
            if not getattr(self, f) > 0:
                raise ValueError(f"Interconnect.{f} must be > 0 bytes/s; got {getattr(self, f)}")

    def allreduce_alpha_s(self, tp: int) -> float:
        return 0.0 if tp <= 1 else self.ar_alpha_s + 2 * (tp - 1) * self.ar_step_s

    def allreduce_s(self, nbytes: float, tp: int) -> float:
        """Seconds of one all-reduce of ``nbytes`` over ``tp`` GPUs (0 for tp = 1)."""
        if tp <= 1:
            return 0.0
        return self.allreduce_alpha_s(tp) + 2 * (tp - 1) / tp * nbytes / self.ar_busbw

    def p2p_s(self, nbytes: float) -> float:
        return self.p2p_alpha_s + nbytes / self.p2p_bw


class ReplicaCost(CostModel):
    """Round times of ``model`` on a ``tp x pp`` replica of ``hw`` (see the module docstring).

    gemm : per-GPU GEMM efficiency; default the shipped table for ``hw.name``, else the constant
        ``hw.mfu`` (e.g. the CPU spec).
    net : :class:`Interconnect` (default NVLink-class figures).
    attn_eff : fraction of peak reached by attention FLOPs (FlashAttention-style kernels).
    overhead_s : fixed seconds per round (scheduling, sampling, launches); default ``hw.overhead_s``.

    Raises :class:`~icml26.core.errors.UserError` when the layout is invalid for the model
    (``tp`` must divide the heads, ``pp`` at most the layers) or the weights do not fit.
    """

    def __init__(self, model: ModelSpec, hw: HardwareSpec, tp: int = 1, pp: int = 1, *,
                 gemm: GemmEfficiency | None = None, net: Interconnect | None = None,
                 attn_eff: float = 0.5, gpu_memory_utilization: float = 0.9,
                 overhead_s: float | None = None):
        if not (isinstance(tp, int) and isinstance(pp, int) and tp >= 1 and pp >= 1):
            raise ValueError(f"tp and pp must be integers >= 1; got tp={tp!r}, pp={pp!r}")
        if not 0 < attn_eff <= 1:
            raise ValueError(f"attn_eff must be in (0, 1]; got {attn_eff}")
        if not 0 < gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1]; got {gpu_memory_utilization}")
        m = model
        if m.n_heads % tp:
            raise UserError(f"layout tp={tp} pp={pp} does not fit {m.name}: tp must divide its "
                            f"{m.n_heads} attention heads")
        if pp > m.n_layers:
            raise UserError(f"layout tp={tp} pp={pp} does not fit {m.name}: pp exceeds its {m.n_layers} layers")
        self.model, self.hw, self.tp, self.pp = m, hw, tp, pp
        self.gemm = gemm if gemm is not None else gemm_table().get(hw.name, GemmEfficiency.constant(hw.mfu))
        self.net = net or Interconnect()
        self.attn_eff = attn_eff
        self.gpu_memory_utilization = gpu_memory_utilization
        self.overhead_s = hw.overhead_s if overhead_s is None else float(overhead_s)
        hd, b = m.hd, m.dtype_bytes
        self.layers_per_stage = ls = m.n_layers / pp
        kvh = math.ceil(m.n_kv_heads / tp)  # KV heads per GPU (replicated past n_kv_heads)
        qo = m.n_heads * hd / tp
        #: per-GPU (N, K) of the four GEMMs of a layer
        self.layer_gemms = ((qo + 2 * kvh * hd, m.hidden), (m.hidden, qo), (2 * m.ffn / tp, m.hidden),
                            (m.hidden, m.ffn / tp))
        self.head_gemm = (m.vocab / tp, m.hidden)
        layer_params = sum(n * k for n, k in self.layer_gemms)
        emb = m.vocab * m.hidden / tp
        # bytes read per stage per micro-batch: its layers plus its share of the LM head
        self.stage_weight_bytes = (ls * layer_params + emb / pp) * b
        held = ls * layer_params + emb * (1 if (m.tied_embeddings or pp > 1) else 2)
        self.weight_bytes_per_gpu = held * b
        self.kv_bytes_per_token_gpu = 2 * ls * kvh * hd * b
        usable = hw.mem_bytes * gpu_memory_utilization
        if usable - self.weight_bytes_per_gpu < self.kv_bytes_per_token_gpu * 16:
            raise UserError(f"layout tp={tp} pp={pp} does not fit {m.name} on {hw.name}: "
                            f"{self.weight_bytes_per_gpu / 1e9:.1f} GB of weights per GPU, "
                            f"{usable / 1e9:.1f} GB usable ({gpu_memory_utilization} x {hw.mem_bytes / 1e9:.0f} GB)")
        self._peak = hw.peak_flops
        self._byte_rate = hw.mem_bw * hw.mbu
        self._attn_s = 4.0 * ls * (m.n_heads / tp) * hd / (hw.peak_flops * attn_eff)  # per (query, ctx) pair
        self._kv_s = self.kv_bytes_per_token_gpu / self._byte_rate  # per KV token read
        self._w_s = self.stage_weight_bytes / self._byte_rate
        self._ar_n = 2 * ls  # all-reduces per stage per micro-batch
        self._ar_a = self.net.allreduce_alpha_s(tp)
        self._ar_b = 0.0 if tp == 1 else 2 * (tp - 1) / tp * m.hidden * b / self.net.ar_busbw  # per token
        self._p2p_a = self.net.p2p_alpha_s if pp > 1 else 0.0
        self._p2p_b = m.hidden * b / self.net.p2p_bw if pp > 1 else 0.0
        self._lin: dict[float, float] = {}
        self._head: dict[float, float] = {}

    # ---- capacity
    def kv_capacity_tokens(self) -> int:
        """KV tokens the replica holds beside its weights in ``gpu_memory_utilization`` of memory."""
        free = self.hw.mem_bytes * self.gpu_memory_utilization - self.weight_bytes_per_gpu
        return int(free // self.kv_bytes_per_token_gpu)

    def engine_config(self, **overrides) -> EngineConfig:
        """The engine limits an operator would set for this layout
        (:meth:`~icml26.sim.engine.EngineConfig.scaled` on its KV capacity); keywords override."""
        return EngineConfig.scaled(self.kv_capacity_tokens(), **overrides)

    # ---- pieces (seconds)
    def linear_s(self, tokens: float) -> float:
        """Per-stage compute seconds of the layers' GEMMs for ``tokens`` rows."""
        t = self._lin.get(tokens)
        if t is None:
            g, peak = self.gemm, self._peak
            t = self.layers_per_stage * sum(2.0 * tokens * n * k / (peak * g(tokens, n, k))
                                            for n, k in self.layer_gemms)
            self._lin[tokens] = t
        return t

    def head_s(self, seqs: float) -> float:
        """Per-stage share of the LM head's compute seconds for ``seqs`` sampled rows."""
        t = self._head.get(seqs)
        if t is None:
            n, k = self.head_gemm
            t = 2.0 * seqs * n * k / (self._peak * self.gemm(seqs, n, k)) / self.pp
            self._head[seqs] = t
        return t

    def stage_s(self, tokens: float, seqs: float, attn: float, kv_read: float) -> float:
        """One stage on one micro-batch: ``tokens`` new, ``seqs`` sequences, ``attn`` query x
        context pairs, ``kv_read`` KV tokens read."""
        comp = self.linear_s(tokens) + self.head_s(seqs) + self._attn_s * attn
        mem = self._w_s + self._kv_s * kv_read
        return max(comp, mem) + self._ar_n * (self._ar_a + self._ar_b * tokens)

    def _p2p(self, tokens: float) -> float:
        return (self.pp - 1) * (self._p2p_a + self._p2p_b * tokens)

    # ---- the CostModel interface
    def forward_time(self, new_tokens: Sequence[int], contexts: Sequence[int]) -> float:
        """Seconds of one round over the batch (sequence i: ``new_tokens[i]`` on top of
        ``contexts[i]`` cached tokens)."""
        s = len(new_tokens)
        if s == 0:
            return 0.0
        n = np.asarray(new_tokens, dtype=float)
        c = np.asarray(contexts, dtype=float)
        a_i = n * c + n * (n + 1) / 2  # attention pairs per sequence
        t, a, r = float(n.sum()), float(a_i.sum()), float((c + n).sum())
        pp = self.pp
        if pp == 1:
            return self.stage_s(t, s, a, r) + self.overhead_s
        g = min(pp, s)
        j = int(n.argmax())
        n1 = float(n[j])
        if g >= 2 and n1 * g > t:  # one sequence's chunk is larger than a fair share: it rides alone
            a1, r1 = float(a_i[j]), float(c[j] + n[j])
            s1 = self.stage_s(n1, 1, a1, r1)
            rest_t = (t - n1) / (g - 1)
            s2 = self.stage_s(rest_t, (s - 1) / (g - 1), (a - a1) / (g - 1), (r - r1) / (g - 1))
            rnd = max(s1 + (g - 1) * s2, pp * max(s1, s2))
            return rnd + self._p2p(max(n1, rest_t)) + self.overhead_s
        st = self.stage_s(t / g, s / g, a / g, r / g)
        return pp * st + self._p2p(t / g) + self.overhead_s

    def decode_run_time(self, contexts: Sequence[int], k: int) -> float:
        """Exact sum of ``k`` decode-only rounds, every context growing by 1 per round."""
        if k <= 0 or len(contexts) == 0:
            return 0.0
        b = len(contexts)
        s0 = float(np.sum(contexts))
        g = min(self.pp, b)
        sh = b / g  # sequences (= tokens) per micro-batch
        lin = self.linear_s(sh) + self.head_s(sh)
        # round j (0-based): attention pairs = KV read = (s0 + b (j+1)) / g per micro-batch
        c0 = lin + self._attn_s * (s0 + b) / g
        m0 = self._w_s + self._kv_s * (s0 + b) / g
        dc, dm = self._attn_s * b / g, self._kv_s * b / g
        comm = self._ar_n * (self._ar_a + self._ar_b * sh)
        per_round = self.pp * comm + self._p2p(sh) + self.overhead_s
        return self.pp * _sum_max_affine(c0, dc, m0, dm, k) + k * per_round

    # ---- summaries
    def decode_rate_per_gpu(self, batch: int | None = None, context: int = 1024) -> float:
        """Decode tokens/s per GPU at a steady ``batch`` (default: the scaled ``max_num_seqs``,
        capped by KV at ``context`` tokens each) of sequences with ``context`` cached tokens."""
        if batch is None:
            batch = min(self.engine_config().max_num_seqs, max(self.kv_capacity_tokens() // (context + 1), 1))
        t = self.forward_time([1] * batch, [context] * batch)
        return batch / t / (self.tp * self.pp)

    def __repr__(self) -> str:
        return f"ReplicaCost({self.model.name}, {self.hw.name}, tp={self.tp}, pp={self.pp})"
