"""Switch plans: move weight shards from the current deployment to the next one.

A replica ``tp x pp`` on GPUs ``gpu_ids`` (stage-major) gives GPU ``s*tp + t`` the layers of stage
``s`` (``n_layers/pp`` each) and column slice ``t/tp .. (t+1)/tp`` of every weight. For every
piece (layer range x slice) a target GPU needs and does not hold, :func:`plan_switch` picks the
source GPU holding it with the lowest load so far, NVLink (same node) before the network. The
switch time is the busiest GPU's bytes over its links (sender and receiver side), not a
constant; replicas that keep their layout and GPUs do not move. KV caches are drained, not
migrated (documented simplification). ``cold_reload_s`` (paper: 50 s) prices a reload from disk.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from icml26.oserve.capacity import Cluster, ReplicaConfig
from icml26.sim.cost import ModelSpec

__all__ = ["Transfer", "SwitchPlan", "plan_switch"]


@dataclass(frozen=True)
class Transfer:
    """``nbytes`` of layers ``[layer_lo, layer_hi)`` x slice ``[col_lo, col_hi)`` from ``src`` to ``dst`` GPU."""

    src: int
    dst: int
    layer_lo: Fraction
    layer_hi: Fraction
    col_lo: Fraction
    col_hi: Fraction
    nbytes: float
    intra_node: bool


@dataclass(frozen=True)
class SwitchPlan:
    transfers: list[Transfer]
    seconds: float
    changed_replicas: list[int]  # indices into the target deployment


def _shards(r: ReplicaConfig, n_layers: int):
    """(gpu, layer_lo, layer_hi, col_lo, col_hi) per GPU of a placed replica."""
    out = []
    for s in range(r.pp):
        for t in range(r.tp):
            out.append((r.gpu_ids[s * r.tp + t], Fraction(s * n_layers, r.pp), Fraction((s + 1) * n_layers, r.pp),
                        Fraction(t, r.tp), Fraction(t + 1, r.tp)))
    return out


def plan_switch(src: Sequence[ReplicaConfig], dst: Sequence[ReplicaConfig], model: ModelSpec,
                cluster: Cluster, cold_reload_s: float = 50.0) -> SwitchPlan:
    """Transfers that give every changed target replica its weights (see module docstring).

    Both deployments must be placed (``gpu_ids`` set). Without any source replica the plan is a
    cold reload of ``cold_reload_s`` seconds.
    """
    for name, dep in (("src", src), ("dst", dst)):
        for r in dep:
            if len(r.gpu_ids) != r.gpus:
                raise ValueError(f"{name} replica {r} is not placed (gpu_ids missing)")
    keep = {(r.tp, r.pp, r.gpu_ids) for r in src}
    changed = [i for i, r in enumerate(dst) if (r.tp, r.pp, r.gpu_ids) not in keep]
    if not changed:
        return SwitchPlan([], 0.0, [])
    if not src:
        return SwitchPlan([], float(cold_reload_s), changed)
    per_layer_col = model.n_params * model.dtype_bytes / model.n_layers  # bytes per layer (all columns)
    held = [sh for r in src for sh in _shards(r, model.n_layers)]
    load: dict[int, float] = defaultdict(float)  # bytes sent so far per source GPU
    busy: dict[int, float] = defaultdict(float)  # seconds of link time per GPU (send + receive)
    transfers = []
    for i in changed:
        for g, l0, l1, c0, c1 in _shards(dst[i], model.n_layers):
            # split the needed region by every source shard boundary, cover each cell once
            ls = sorted({l0, l1} | {x for _, a, b, _, _ in held for x in (a, b) if l0 < x < l1})
            cs = sorted({c0, c1} | {x for _, _, _, a, b in held for x in (a, b) if c0 < x < c1})
            for la, lb in zip(ls, ls[1:], strict=False):
                for ca, cb in zip(cs, cs[1:], strict=False):
                    owners = [h[0] for h in held if h[1] <= la and lb <= h[2] and h[3] <= ca and cb <= h[4]]
                    if g in owners:
                        continue  # already on this GPU
                    same = cluster.node_of(g)
                    s = min(owners, key=lambda o: (cluster.node_of(o) != same, load[o], o))
                    nbytes = float((lb - la) * (cb - ca)) * per_layer_col
                    intra = cluster.node_of(s) == same
                    bw = (cluster.nvlink_GBps if intra else cluster.net_GBps) * 1e9
                    load[s] += nbytes
                    busy[s] += nbytes / bw
                    busy[g] += nbytes / bw
                    transfers.append(Transfer(s, g, la, lb, ca, cb, nbytes, intra))
    return SwitchPlan(transfers, max(busy.values(), default=0.0), changed)
