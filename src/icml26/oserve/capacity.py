"""Clusters, replica layouts and per-type processing rates ``n[k, j]`` (requests/s).

A replica is ``tp x pp`` GPUs. Valid layouts (:func:`valid_configs`): ``tp`` divides the head
count and fits in one node, each of the ``pp`` stages sits inside one node, and the weights fit
with room for 4096 KV tokens. Each replica is priced by the sim's layout model
:class:`~icml26.sim.replica.ReplicaCost` (per-GPU GEMM efficiency, alpha-beta all-reduce, pipeline
rounds: PP never cuts a single request's latency) and runs with engine limits scaled from its KV
capacity (:func:`replica_engine_config`), as an operator would set them.

:func:`rate_table` is the offline profile the scheduler needs: for a replica and a request type
with mean input ``I`` and output ``O`` tokens, the steady batch is
``b = min(max_num_seqs, (1 - headroom) * KV / (I + O/2), budget / (1 + I/O))`` (the layout's own
limits), lowered to meet a per-type latency target when one is given; each iteration
decodes ``b`` sequences and prefills the ``m = b/O`` requests that replace the finished ones (one
chunk of ``m*I`` tokens when ``m >= 1``; else a fraction ``m`` of iterations carries one whole
prompt, as chunked prefill does not split a prompt that fits the budget), so ``n = m / t_iter``,
``t_iter`` the mean iteration time from the :mod:`icml26.sim` cost model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from icml26.core.errors import UserError
from icml26.sim.cost import CostModel, HardwareSpec, LinearCost, ModelSpec
from icml26.sim.engine import EngineConfig
from icml26.sim.replica import ReplicaCost

__all__ = ["Cluster", "ReplicaConfig", "Profile", "ProfiledCost", "valid_configs", "place", "rate_table", "replica_cost",
           "replica_engine_config", "unloaded_latency", "check_placement", "min_gpus", "llama2_70b", "llama2_13b", "llama_30b"]


def llama2_70b() -> ModelSpec:
    return ModelSpec("Llama-2-70B", 80, 8192, 64, 8, 28672, 32000)


def llama2_13b() -> ModelSpec:
    return ModelSpec("Llama-2-13B", 40, 5120, 40, 40, 13824, 32000)


def llama_30b() -> ModelSpec:
    """LLaMA-1 30B: 60 layers, hidden 6656, 52 heads, multi-head attention (52 KV heads)."""
    return ModelSpec("LLaMA-30B", 60, 6656, 52, 52, 17920, 32000)


@dataclass(frozen=True)
class Cluster:
    """``nodes x gpus_per_node`` copies of ``gpu``; NVLink and network bandwidth in GB/s."""

    nodes: int
    gpus_per_node: int
    gpu: HardwareSpec
    nvlink_GBps: float = 400.0
    net_GBps: float = 50.0

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise ValueError(f"nodes and gpus_per_node must be >= 1; got {self.nodes}, {self.gpus_per_node}")
        if not (self.nvlink_GBps > 0 and self.net_GBps > 0):
            raise ValueError("nvlink_GBps and net_GBps must be > 0")

    @property
    def n_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def node_of(self, gpu: int) -> int:
        return gpu // self.gpus_per_node


@dataclass(frozen=True)
class ReplicaConfig:
    """One engine: ``tp x pp`` GPUs, optionally placed on ``gpu_ids`` (stage-major order)."""

    tp: int
    pp: int = 1
    gpu_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.tp < 1 or self.pp < 1:
            raise ValueError(f"tp and pp must be >= 1; got tp={self.tp}, pp={self.pp}")
        if self.gpu_ids and len(self.gpu_ids) != self.tp * self.pp:
            raise ValueError(f"replica tp={self.tp} pp={self.pp} needs {self.tp * self.pp} gpu_ids; "
                             f"got {len(self.gpu_ids)}")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def layout(self) -> tuple[int, int]:
        return (self.tp, self.pp)

    def __str__(self) -> str:
        return f"tp{self.tp}pp{self.pp}"


#: a layout is valid only if it holds this many KV tokens beside its weights (one long request)
MIN_KV_TOKENS = 4096


def _fits(model: ModelSpec, hw: HardwareSpec, tp: int, pp: int, mem_util: float) -> bool:
    """The layout's :class:`~icml26.sim.replica.ReplicaCost` exists (``tp`` divides the heads, the
    weights fit) and holds :data:`MIN_KV_TOKENS` KV tokens."""
    try:
        return ReplicaCost(model, hw, tp, pp, gpu_memory_utilization=mem_util).kv_capacity_tokens() >= MIN_KV_TOKENS
    except UserError:
        return False


def valid_configs(model: ModelSpec, cluster: Cluster, gpus: int | None = None,
                  mem_util: float = 0.9, profile: Profile | None = None,
                  max_gpus: int | None = None, pow2: bool = True) -> list[ReplicaConfig]:
    """All ``(tp, pp)`` layouts (unplaced) that are valid for ``model`` on ``cluster``; only those
    with ``tp * pp == gpus`` when given. ``tp`` divides the heads and fits a node; ``pp`` divides
    the layers; the weights fit with room for 4096 KV tokens; a replica has at most ``max_gpus``
    GPUs (default one node) and, with ``pow2``, a power-of-two GPU count (1, 2, 4, 8, ...: the
    replica sizes deployments use; odd pipeline depths such as 3 or 5 stages are left out). With a
    measured ``profile``, only the layouts it covers (a layout nobody measured has no rates)."""
    cap = min(cluster.n_gpus, max_gpus if max_gpus is not None else cluster.gpus_per_node)
    out = []
    for tp in range(1, cluster.gpus_per_node + 1):
        if model.n_heads % tp:
            continue
        for pp in range(1, cap // tp + 1):
            g = tp * pp
            if model.n_layers % pp or (gpus is not None and g != gpus) or (pow2 and g & (g - 1)):
                continue
            if profile is not None and (tp, pp) not in profile.costs:
                continue
            if g <= cap and _fits(model, cluster.gpu, tp, pp, mem_util):
                out.append(ReplicaConfig(tp, pp))
    return out


def min_gpus(model: ModelSpec, cluster: Cluster, mem_util: float = 0.9) -> int:
    cfgs = valid_configs(model, cluster, mem_util=mem_util)
    if not cfgs:
        need = math.ceil(model.n_params * model.dtype_bytes / (cluster.gpu.mem_bytes * mem_util))
        raise UserError(f"{model.name} fits no layout on {cluster.n_gpus} x {cluster.gpu.name}: "
                        f"its weights alone need at least {need} GPUs")
    return min(c.gpus for c in cfgs)


def place(configs: Sequence[ReplicaConfig], cluster: Cluster) -> list[ReplicaConfig] | None:
    """Give every replica GPU ids: each pipeline stage (``tp`` GPUs) inside one node, first-fit
    decreasing by ``tp``. Returns ``None`` when the layouts do not fit. Order is preserved."""
    free = [list(range(n * cluster.gpus_per_node, (n + 1) * cluster.gpus_per_node))
            for n in range(cluster.nodes)]
    ids: dict[int, list[int]] = {}
    for i in sorted(range(len(configs)), key=lambda i: (-configs[i].tp, -configs[i].pp, i)):
        c = configs[i]
        got: list[int] = []
        for _ in range(c.pp):
            # the node with the least room that still fits a stage (keeps big holes for big tp)
            nodes = [n for n in range(cluster.nodes) if len(free[n]) >= c.tp]
            if not nodes:
                return None
            n = min(nodes, key=lambda n: (len(free[n]), n))
            got += free[n][: c.tp]
            free[n] = free[n][c.tp:]
        ids[i] = got
    return [ReplicaConfig(c.tp, c.pp, tuple(ids[i])) for i, c in enumerate(configs)]


def check_placement(configs: Sequence[ReplicaConfig], cluster: Cluster, model: ModelSpec,
                    mem_util: float = 0.9) -> None:
    """Raise :class:`UserError` for a layout that does not fit the model (``tp`` does not divide
    the heads, ``pp`` does not divide the layers, the weights leave no room for 4096 KV tokens),
    duplicate / out-of-range GPU ids, or a stage spanning nodes; the message names the replica."""
    seen: set[int] = set()
    for r, c in enumerate(configs):
        if model.n_heads % c.tp:
            raise UserError(f"replica {r}: tp={c.tp} does not divide {model.name}'s {model.n_heads} attention heads")
        if model.n_layers % c.pp:
            raise UserError(f"replica {r}: pp={c.pp} does not divide {model.name}'s {model.n_layers} layers")
        if not _fits(model, cluster.gpu, c.tp, c.pp, mem_util):
            need = model.n_params * model.dtype_bytes / 1e9
            raise UserError(f"replica {r}: tp={c.tp} pp={c.pp} ({c.gpus} x {cluster.gpu.name}) cannot hold "
                            f"{model.name}'s {need:.0f} GB of weights plus 4096 KV tokens at "
                            f"{mem_util:.0%} memory")
        if c.tp > cluster.gpus_per_node:
            raise UserError(f"replica {r}: tp={c.tp} spans nodes ({cluster.gpus_per_node} GPUs per node)")
        for g in c.gpu_ids:
            if not 0 <= g < cluster.n_gpus:
                raise UserError(f"replica {r}: GPU id {g} out of range [0, {cluster.n_gpus})")
            if g in seen:
                raise UserError(f"replica {r}: GPU id {g} used twice")
            seen.add(g)
        for s in range(c.pp):
            stage = c.gpu_ids[s * c.tp:(s + 1) * c.tp]
            if stage and len({cluster.node_of(g) for g in stage}) > 1:
                raise UserError(f"replica {r}: pipeline stage {s} (GPUs {list(stage)}) spans nodes")


class ProfiledCost(CostModel):
    """A measured whole-replica iteration time (:class:`~icml26.sim.cost.LinearCost`) with the KV
    capacity the model's memory arithmetic gives for the layout (what vLLM's profiler reports)."""

    def __init__(self, cost: LinearCost, kv_tokens: int):
        self.cost, self.kv_tokens = cost, int(kv_tokens)

    def kv_capacity_tokens(self) -> int:
        return self.kv_tokens

    def forward_time(self, new_tokens, contexts) -> float:
        return self.cost.forward_time(new_tokens, contexts)

    def decode_run_time(self, contexts, k) -> float:
        return self.cost.decode_run_time(contexts, k)


#: columns of a measured profile CSV (one row per timed engine iteration)
PROFILE_COLUMNS = ("tp", "pp", "new_tokens", "num_seqs", "context_tokens", "time_s")


class Profile:
    """Measured per-layout iteration times: ``{(tp, pp): LinearCost}``.

    :meth:`from_csv` reads rows ``tp, pp, new_tokens, num_seqs, context_tokens, time_s`` (one
    timed engine step of a ``tp x pp`` replica: tokens computed, sequences in the batch, cached
    tokens before the step, seconds) and fits one :class:`~icml26.sim.cost.LinearCost` per layout
    by non-negative least squares. Pipeline replicas are timed as a whole (a step's wall time), so
    the fit already contains the stages' latency. Rates then come from these fits instead of the
    roofline; only profiled layouts are searched.
    """

    def __init__(self, costs: dict[tuple[int, int], LinearCost], source: str = ""):
        if not costs:
            raise UserError(f"profile {source or ''} has no layouts".replace("  ", " "))
        self.costs, self.source = dict(costs), source

    @classmethod
    def from_rows(cls, rows, source: str = "profile") -> Profile:
        groups: dict[tuple[int, int], list] = {}
        lines: dict[tuple[int, int], list[int]] = {}
        for i, r in enumerate(rows, start=2):  # row 1 is the CSV header
            missing = [c for c in PROFILE_COLUMNS if r.get(c) in (None, "")]
            if missing:
                raise UserError(f"{source} row {i}: missing column(s) {missing} "
                                f"(columns: {', '.join(PROFILE_COLUMNS)}); got {dict(r)}")
            try:
                tp, pp = int(r["tp"]), int(r["pp"])
            except (TypeError, ValueError):
                raise UserError(f"{source} row {i}: need integer columns tp, pp "
                                f"(columns: {', '.join(PROFILE_COLUMNS)}); got {dict(r)}") from None
            if tp < 1 or pp < 1:
                raise UserError(f"{source} row {i}: tp and pp must be >= 1; got tp={tp}, pp={pp}")
            for c in PROFILE_COLUMNS[2:]:
                try:
                    v = float(r[c])
                except (TypeError, ValueError):
                    v = math.nan
                if not (math.isfinite(v) and (v > 0 if c == "time_s" else v >= 0)):
                    raise UserError(f"{source} row {i}, column {c!r}: expected a number "
                                    f"{'> 0 (seconds)' if c == 'time_s' else '>= 0'}; got {r[c]!r}")
            groups.setdefault((tp, pp), []).append(r)
            lines.setdefault((tp, pp), []).append(i)
        costs = {}
        for lay, rs in sorted(groups.items()):
            try:
                costs[lay] = LinearCost.fit(rs)
            except UserError as e:
                where = ", ".join(map(str, lines[lay][:8])) + (", ..." if len(lines[lay]) > 8 else "")
                raise UserError(f"{source}, layout tp={lay[0]} pp={lay[1]} (row(s) {where}): {e}") from None
        return cls(costs, source)

    @classmethod
    def from_csv(cls, path) -> Profile:
        import csv
        from pathlib import Path

        path = Path(path)
        if not path.is_file():
            raise UserError(f"profile file not found: {path}")
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        if not rows:
            raise UserError(f"{path}: no rows (expected columns {', '.join(PROFILE_COLUMNS)})")
        return cls.from_rows(rows, str(path))

    def cost(self, model: ModelSpec, cluster: Cluster, c: ReplicaConfig, mem_util: float = 0.9) -> ProfiledCost:
        if c.layout not in self.costs:
            have = ", ".join(f"tp={t} pp={p}" for t, p in sorted(self.costs))
            raise UserError(f"{self.source}: layout tp={c.tp} pp={c.pp} was not profiled (profiled: {have})")
        kv = ReplicaCost(model, cluster.gpu, c.tp, c.pp, gpu_memory_utilization=mem_util).kv_capacity_tokens()
        return ProfiledCost(self.costs[c.layout], kv)


def replica_cost(model: ModelSpec, cluster: Cluster, c: ReplicaConfig, mem_util: float = 0.9,
                 profile: Profile | None = None) -> CostModel:
    """The cost model of one replica: measured (``profile``) when given, else the layout model
    :class:`~icml26.sim.replica.ReplicaCost` (GEMM efficiency, alpha-beta all-reduce, pipeline
    rounds)."""
    if profile is not None:
        return profile.cost(model, cluster, c, mem_util)
    return ReplicaCost(model, cluster.gpu, c.tp, c.pp, gpu_memory_utilization=mem_util)


def replica_engine_config(cost: CostModel, **overrides) -> EngineConfig:
    """The engine limits of one replica: ``max_num_seqs`` and ``max_num_batched_tokens`` scaled
    with its KV capacity (:meth:`~icml26.sim.engine.EngineConfig.scaled`, what an operator sets);
    keywords override. The same rule for a measured (profiled) replica."""
    if hasattr(cost, "engine_config"):
        return cost.engine_config(**overrides)
    return EngineConfig.scaled(cost.kv_capacity_tokens(), **overrides)


def _iteration_s(cost: CostModel, b: float, i_len: float, o_len: float) -> float:
    """Mean seconds of one steady-state iteration with ``b`` decoding sequences of a type with
    mean ``i_len`` / ``o_len`` tokens (see the module docstring)."""
    ctx = i_len + o_len / 2
    bi, m = max(int(round(b)), 1), b / o_len  # m: prompts admitted per iteration
    dec, dctx = [1] * bi, [int(ctx)] * bi
    if m < 1:  # a fraction m of the iterations carries one whole prompt
        return m * cost.forward_time(dec + [int(i_len)], dctx + [0]) + (1 - m) * cost.forward_time(dec, dctx)
    # one chunk of m*i_len tokens whose attention work equals m prompts of i_len tokens
    p = m * i_len
    c0 = max(m * i_len * (i_len + 1) / 2 - p * (p + 1) / 2, 0.0) / p
    return cost.forward_time(dec + [int(round(p))], dctx + [int(c0)])


def rate_table(model: ModelSpec, cluster: Cluster, replicas: Sequence[ReplicaConfig],
               type_lengths: np.ndarray, max_num_seqs: int | None = None, headroom: float = 0.15,
               max_num_batched_tokens: int | None = None,
               mem_util: float = 0.9, cache: dict | None = None,
               profile: Profile | None = None, slo_s=None) -> np.ndarray:
    """``n[k, j]`` float64 requests/s of replica ``k`` on type ``j`` alone.

    ``type_lengths``: ``(K, 2)`` mean (input, output) tokens per type. ``max_num_seqs`` /
    ``max_num_batched_tokens``: the engine limits; default per layout from its KV capacity
    (:func:`replica_engine_config`, as the simulated engines run). ``headroom``: KV fraction kept
    free (paper: 10-20%). ``cache``: optional dict memoising by layout. ``profile``: measured
    iteration times per layout (:class:`Profile`) instead of the layout model.

    ``slo_s``: optional ``(K,)`` end-to-end latency target per type (seconds). The steady batch
    is then the largest ``b`` whose service time ``O * t_iter(b)`` meets it (goodput: the rate a
    replica sustains *within* the SLO); a layout on which even ``b = 1`` misses it gets rate 0.
    """
    if not 0 <= headroom < 1:
        raise ValueError(f"headroom must be in [0, 1); got {headroom}")
    L = np.asarray(type_lengths, dtype=float)
    slo = None if slo_s is None else np.asarray(slo_s, dtype=float)
    if slo is not None and (slo.shape != (len(L),) or not (slo > 0).all()):
        raise ValueError(f"slo_s must be ({len(L)},) positive seconds; got {slo_s!r}")
    out = np.zeros((len(replicas), len(L)))
    for k, c in enumerate(replicas):
        key = c.layout
        if cache is not None and key in cache:
            out[k] = cache[key]
            continue
        cost = replica_cost(model, cluster, c, mem_util, profile)
        ec = replica_engine_config(cost)
        seqs = max_num_seqs if max_num_seqs is not None else ec.max_num_seqs
        budget = max_num_batched_tokens if max_num_batched_tokens is not None else ec.max_num_batched_tokens
        kv = cost.kv_capacity_tokens() * (1 - headroom)
        for j, (i_len, o_len) in enumerate(L):
            ctx = i_len + o_len / 2
            # steady state: b decoding sequences; each iteration finishes b/o_len requests and
            # prefills as many new ones (b*i_len/o_len tokens, one chunk), all under the token budget
            b = min(seqs, kv / max(ctx, 1.0), budget / (1 + i_len / o_len))
            if b < 1 or kv < i_len + o_len:
                continue  # this type does not fit: rate 0
            if slo is not None and o_len * _iteration_s(cost, b, i_len, o_len) > slo[j]:
                lo, hi = 1, int(b)  # largest integer batch within the SLO (service time grows with b)
                if o_len * _iteration_s(cost, 1, i_len, o_len) > slo[j]:
                    continue  # not even one request alone meets the SLO here
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    if o_len * _iteration_s(cost, mid, i_len, o_len) <= slo[j]:
                        lo = mid
                    else:
                        hi = mid - 1
                b = float(lo)
            out[k, j] = (b / o_len) / _iteration_s(cost, b, i_len, o_len)
        if cache is not None:
            cache[key] = out[k].copy()
    return out


def unloaded_latency(model: ModelSpec, cluster: Cluster, type_lengths: np.ndarray, mem_util: float = 0.9,
                     profile: Profile | None = None) -> np.ndarray:
    """(K,) seconds: the end-to-end latency of one request of each type's mean lengths alone on
    its fastest valid layout (prefill, then ``O - 1`` decode steps) — the base of a per-type SLO
    that does not favour any deployment."""
    L = np.asarray(type_lengths, dtype=float)
    best = np.full(len(L), np.inf)
    for c in valid_configs(model, cluster, mem_util=mem_util, profile=profile):
        cost = replica_cost(model, cluster, c, mem_util, profile)
        for j, (i_len, o_len) in enumerate(L):
            i, o = max(int(round(i_len)), 1), max(int(round(o_len)), 1)
            if cost.kv_capacity_tokens() < i + o:
                continue
            t = cost.forward_time([i], [0]) + cost.decode_run_time([i + 1], o - 1)
            best[j] = min(best[j], t)
    return best
