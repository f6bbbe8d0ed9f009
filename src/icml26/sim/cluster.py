"""A fleet of engines under a router whose deployment changes over time (live switching).

:func:`simulate` replays requests on one fixed set of engines. :func:`simulate_cluster` takes a
*schedule* of deployments: at each switch time the replicas whose identity (``key``) is in both
deployments keep running untouched; removed replicas leave; new replicas come up after a delay.
Two ways to switch (``mode``):

- ``"drain"`` (live switching, OServe): a removed replica stops admitting at the switch; requests
  still waiting in its queue are re-routed at once; requests it is already serving finish there.
  A new replica starts after ``ready_s[key]`` seconds (its weight transfer) *and* after every
  removed replica that shares one of its GPUs has drained.
- ``"cold"`` (stop and reload): removed replicas stop at once; everything they held, running or
  waiting, is re-routed and recomputed from scratch; new replicas start after ``ready_s[key]``.

While a new deployment is coming up, its router's choice is used when that replica is serving,
else the request goes to the least-loaded serving replica; when none serves, it waits and is
routed the moment one comes up. Latency is always measured from the request's arrival.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from icml26.sim.engine import Engine, RequestRecord, Router
from icml26.sim.trace import Request

__all__ = ["Deployment", "ClusterEvent", "simulate_cluster"]


@dataclass
class Deployment:
    """One deployment of the fleet.

    ``keys``: identity of each replica (equal keys across deployments = the same running engine);
    ``make_engine(i)``: a fresh engine for replica ``i``; ``router``: routes over this
    deployment's replicas in order; ``ready_s``: seconds after the switch before a *new* replica
    serves (missing = 0); ``gpus``: GPUs per replica key (a new replica also waits for removed
    replicas on the same GPUs to drain, in ``"drain"`` mode).
    """

    keys: list[Hashable]
    make_engine: Callable[[int], Engine]
    router: Router
    ready_s: dict[Hashable, float] = field(default_factory=dict)
    gpus: dict[Hashable, frozenset[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(set(self.keys)) != len(self.keys):
            raise ValueError(f"deployment replica keys must be unique; got {self.keys}")
        if not self.keys:
            raise ValueError("a deployment needs at least one replica")


@dataclass(frozen=True)
class ClusterEvent:
    time_s: float
    kind: str  # "switch", "ready", "drained", "aborted"
    key: Hashable = None
    detail: str = ""


class _Slot:
    def __init__(self, key, engine: Engine, ready_at: float | None, blockers: list[Engine]):
        self.key, self.engine = key, engine
        self.ready_at = ready_at  # None until known (blocked by draining replicas)
        self.blockers = blockers
        self.delay = 0.0
        self.switch_t = 0.0

    def serving(self, now: float) -> bool:
        return self.ready_at is not None and self.ready_at <= now


def _least_loaded(slots: Sequence[_Slot]) -> _Slot:
    return min(slots, key=lambda s: (len(s.engine.running) + len(s.engine.queue), s.engine.index))


def simulate_cluster(requests: Sequence[Request], schedule: Sequence[tuple[float, Deployment]],
                     mode: str = "drain", horizon_s: float = math.inf
                     ) -> tuple[list[RequestRecord], list[ClusterEvent]]:
    """Replay ``requests`` through a fleet that follows ``schedule`` ``[(t0, dep0), (t1, dep1),
    …]`` (``t0`` is the start; later entries are switches). Returns (records, events)."""
    if mode not in ("drain", "cold"):
        raise ValueError(f"mode must be 'drain' or 'cold'; got {mode!r}")
    if not schedule:
        raise ValueError("schedule needs at least one deployment")
    times = [t for t, _ in schedule]
    if times != sorted(times):
        raise ValueError(f"switch times must increase; got {times}")
    counter = iter(range(10**9))
    events: list[ClusterEvent] = []
    finished: list[Engine] = []   # engines that left the fleet (their records still count)
    draining: list[Engine] = []
    held: list[Request] = []      # arrivals with no serving replica yet
    t0, dep = schedule[0]
    slots = []
    for i, key in enumerate(dep.keys):
        eng = dep.make_engine(i)
        eng.index = next(counter)
        eng.clock = t0
        slots.append(_Slot(key, eng, t0, []))
    pending = list(schedule[1:])

    def engines_all():
        return [s.engine for s in slots] + draining

    def advance(t: float) -> None:
        for e in engines_all():
            e.run_until(t)
        for e in list(draining):
            if not e.has_work():
                draining.remove(e)
                finished.append(e)
                events.append(ClusterEvent(e.clock, "drained", getattr(e, "_key", None)))
        for s in slots:
            if s.ready_at is None and all(not b.has_work() for b in s.blockers):
                done = max([b.clock for b in s.blockers], default=s.switch_t)
                s.ready_at = max(s.switch_t + s.delay, done)
            if s.ready_at is not None and s.ready_at <= t and s.engine.clock < s.ready_at:
                s.engine.clock = s.ready_at
                events.append(ClusterEvent(s.ready_at, "ready", s.key))
        if held:
            up = [s for s in slots if s.serving(t)]
            if up:
                start = min(s.ready_at for s in up)
                for r in list(held):
                    route(r, max(start, r.arrival_s))
                held.clear()

    def route(req: Request, now: float) -> None:
        up = [s for s in slots if s.serving(now)]
        if not up:
            held.append(req)
            return
        i = dep.router.route(req, [s.engine for s in slots], now)
        if not 0 <= i < len(slots):
            raise ValueError(f"router returned replica {i}; deployment has {len(slots)}")
        slot = slots[i] if slots[i].serving(now) else _least_loaded(up)
        slot.engine.add(req, now)

    def switch(t: float, new: Deployment) -> None:
        nonlocal dep, slots
        advance(t)
        old = {s.key: s for s in slots}
        removed = [s for s in slots if s.key not in set(new.keys)]
        rerouted: list[Request] = []
        for s in removed:
            e = s.engine
            e._key = s.key
            while len(e.queue):
                rerouted.append(e.queue.pop(t).req)
            if mode == "cold":
                for seq in list(e.running):
                    rerouted.append(seq.req)
                e.running.clear()
                e.used_blocks = 0
                finished.append(e)
                events.append(ClusterEvent(t, "aborted", s.key, f"{len(rerouted)} re-routed"))
            elif e.has_work():
                draining.append(e)
            else:
                finished.append(e)
        new_slots = []
        for i, key in enumerate(new.keys):
            if key in old:
                new_slots.append(old[key])
                continue
            eng = new.make_engine(i)
            eng.index = next(counter)
            eng.clock = t
            gpus = new.gpus.get(key, frozenset())
            blockers = [s.engine for s in removed if mode == "drain"
                        and gpus & dep.gpus.get(s.key, frozenset())]
            slot = _Slot(key, eng, None, blockers)
            slot.delay, slot.switch_t = float(new.ready_s.get(key, 0.0)), t
            new_slots.append(slot)
        events.append(ClusterEvent(t, "switch", None, f"{len(removed)} replicas out, "
                                   f"{sum(k not in old for k in new.keys)} in"))
        dep, slots = new, new_slots
        advance(t)
        for r in sorted(rerouted, key=lambda r: r.arrival_s):
            route(r, t)

    for req in sorted(requests, key=lambda r: r.arrival_s):
        if req.arrival_s > horizon_s:
            break
        while pending and pending[0][0] <= req.arrival_s:
            switch(*pending.pop(0))
        advance(req.arrival_s)
        route(req, req.arrival_s)
    while pending and pending[0][0] <= horizon_s:
        switch(*pending.pop(0))
    # run everything out (held requests wait for replicas that come up later)
    while True:
        advance(horizon_s if math.isfinite(horizon_s) else _next_time(slots, draining))
        if not held and not any(e.has_work() for e in engines_all()):
            break
        if not math.isfinite(horizon_s):
            continue
        break
    recs = [r for e in engines_all() + finished for r in e.records if r.finish_s <= horizon_s]
    return sorted(recs, key=lambda r: (str(type(r.id)), r.id)), events


def _next_time(slots, draining) -> float:
    """A time far enough ahead to finish all work (engines step until idle regardless)."""
    ready = [s.ready_at for s in slots if s.ready_at is not None]
    clocks = [s.engine.clock for s in slots] + [e.clock for e in draining]
    return max(ready + clocks) + 1e7
