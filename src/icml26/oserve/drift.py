"""OServe under a drifting mix: predict per-type load, re-plan, switch live (claim rows).

Synthetic per-minute counts (:func:`~icml26.oserve.predictor.synthetic_counts`: a diurnal
rotation of the type mix with smoothed Gamma bursts) give ``days`` of history and a test window.
The per-type LSTM (and, as baselines, a moving average and one aggregate LSTM) is trained on the
history and predicts every minute of the window (RRMSE rows). Every ``interval_min`` minutes the
planner searches a deployment for the rates it expects over the next interval, starting from the
current one, and switches when the new plan's LP capacity beats the current one's by
``min_gain``. Four fleets replay the *same* window in :func:`icml26.sim.cluster.simulate_cluster`:

- **static**: one plan for the history's mean rates, never switched;
- **cold reload**: predicted plans, switched by stopping the changed replicas and reloading
  them (``cold_reload_s``, default 50 s; their requests are re-routed and recomputed);
- **OServe switching**: predicted plans, switched live: changed replicas drain, new ones start
  after the peer-to-peer weight transfer of :func:`~icml26.oserve.switch.plan_switch`;
- **oracle**: the true mean rates of each interval, switched live.

Requests carry their true type (oracle classification, as in the main claim). The rate is set so
that the window's mean load is ``load`` of the static plan's LP capacity.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from icml26.oserve.capacity import replica_cost, replica_engine_config
from icml26.oserve.dispatch import capacity_scale
from icml26.oserve.predictor import (
    AggregateLSTM,
    MovingAverage,
    TypeRatePredictor,
    rrmse,
    synthetic_counts,
)
from icml26.oserve.router import WeightedTypeRouter
from icml26.oserve.search import Plan, Scorer, search
from icml26.oserve.switch import plan_switch
from icml26.oserve.workload import TYPE_LENGTHS, request_types
from icml26.sim import Engine, FCFSQueue, summarize
from icml26.sim.cluster import Deployment, simulate_cluster
from icml26.sim.trace import Request

__all__ = ["DriftSetting", "counts_to_trace", "drift_experiment"]


@dataclass(frozen=True)
class DriftSetting:
    k: int = 4
    days: int = 3
    window_min: int = 120
    interval_min: int = 15
    load: float = 0.6
    cold_reload_s: float = 50.0
    min_gain: float = 1.05
    epochs: int = 5
    lookback: int = 50
    patience: int = 20
    weights: tuple[float, ...] = (1.0, 2.0, 3.0, 4.0)

    def __post_init__(self) -> None:
        if self.window_min % self.interval_min:
            raise ValueError(f"window_min ({self.window_min}) must be a multiple of interval_min "
                             f"({self.interval_min})")
        if not 0 < self.load < 1.5 or self.min_gain < 1 or self.days < 1:
            raise ValueError(f"bad drift setting {self}")


def counts_to_trace(counts: np.ndarray, k: int, seed: int, t0_min: int = 0) -> list[Request]:
    """Requests from per-minute per-type counts: uniform arrivals inside each minute, lengths
    from the type's distribution; ``type`` holds the type index as a string."""
    rng = np.random.default_rng(seed)
    types = request_types(np.ones(k), k)
    out, rid = [], 0
    for m, row in enumerate(counts):
        for j, c in enumerate(row):
            if c == 0:
                continue
            t = 60.0 * (t0_min + m) + np.sort(rng.uniform(0, 60, int(c)))
            ins, outs = types[j].inputs.sample(rng, int(c)), types[j].outputs.sample(rng, int(c))
            for a, i, o in zip(t, ins, outs, strict=True):
                out.append(Request(rid, float(a), int(i), int(o), type=str(j)))
                rid += 1
    out.sort(key=lambda r: r.arrival_s)
    return out


def _keys(plan: Plan):
    return [(r.tp, r.pp, tuple(r.gpu_ids)) for r in plan.replicas]


def _deployment(plan: Plan, model, cluster, ready_s: dict) -> Deployment:
    def make(i):
        cost = replica_cost(model, cluster, plan.replicas[i])
        return Engine(replica_engine_config(cost, oversize="drop"), cost, FCFSQueue())

    keys = _keys(plan)
    return Deployment(keys, make, WeightedTypeRouter(plan.x, lambda r: int(r.type)), ready_s,
                      {k: frozenset(k[2]) for k in keys})


def _plans(sc_for, lam_per_interval, start: Plan, st: DriftSetting, seed: int):
    """Plan per interval (searching from the current deployment); switch on ``min_gain``."""
    cur, out = start, []
    for i, lam in enumerate(lam_per_interval):
        sc = sc_for(lam)
        cur_score = sc([r.layout for r in cur.replicas])
        cand = search(sc, start=[r.layout for r in cur.replicas], patience=st.patience,
                      seed=seed + i)
        if cand.score > st.min_gain * cur_score:
            cur = cand
        else:  # keep the deployment, refresh its routing weights for the new rates
            cur = Plan(cur.replicas, cur_score, sc.plan([r.layout for r in cur.replicas]).x)
        out.append(cur)
    return out


def _schedule(plans, t_starts, model, cluster, mode, cold_s):
    sched, prev = [], None
    for t, plan in zip(t_starts, plans, strict=True):
        if prev is not None and _keys(plan) == _keys(prev):
            # same replicas: only the routing weights change (a new router, same engines)
            sched.append((t, _deployment(plan, model, cluster, {})))
            prev = plan
            continue
        if prev is None:
            ready = {}
        elif mode == "cold":
            ready = {k: cold_s for k in _keys(plan)}
        else:
            sp = plan_switch(prev.replicas, plan.replicas, model, cluster, cold_reload_s=cold_s)
            ready = {k: sp.seconds for k in _keys(plan)}
        sched.append((t, _deployment(plan, model, cluster, ready)))
        prev = plan
    return sched


def drift_experiment(model, cluster, st: DriftSetting, seed: int = 0, progress=None) -> dict:
    """Run the four fleets on one seed; returns RRMSE, per-system summaries, switch counts and
    per-request (arrival, e2e) for the latency-over-time figure."""
    k = st.k
    w = np.asarray(st.weights[:k], float)
    lengths = np.array([(i, o) for _, i, o in (TYPE_LENGTHS if k == 4 else
                                                (TYPE_LENGTHS[0], TYPE_LENGTHS[3]))],
                       dtype=float)

    def sc_for(lam):
        return Scorer(model, cluster, lengths, np.maximum(np.asarray(lam, float), 1e-6))

    hist_min = st.days * 1440
    unit = synthetic_counts(hist_min + st.window_min, w, 100.0, seed=seed)  # shape only
    mean_mix = unit[:hist_min].mean(0) / 60.0  # req/s at 100 req/min
    static0 = search(sc_for(mean_mix), patience=st.patience, seed=seed)
    cap = capacity_scale(sc_for(mean_mix).rates([r.layout for r in static0.replicas]),
                         mean_mix / mean_mix.sum())  # req/s the static plan serves at that mix
    rate_per_min = st.load * cap * 60.0
    counts = synthetic_counts(hist_min + st.window_min, w, rate_per_min, seed=seed)
    hist, window = counts[:hist_min], counts[hist_min:]
    t0 = time.perf_counter()
    preds = {}
    for name, p in (("per-type LSTM", TypeRatePredictor(k, lookback=st.lookback,
                                                        epochs=st.epochs, seed=seed)),
                    ("aggregate LSTM", AggregateLSTM(k, lookback=st.lookback, epochs=st.epochs,
                                                     seed=seed)),
                    ("moving average", MovingAverage(st.lookback))):
        p.fit(hist)
        series = counts[hist_min - st.lookback:]
        preds[name] = p.predict(series)  # (window_min, K): minute-ahead predictions
    fit_s = time.perf_counter() - t0
    rr = {name: rrmse(pr, window) for name, pr in preds.items()}
    n_int = st.window_min // st.interval_min
    starts_min = [hist_min + i * st.interval_min for i in range(n_int)]
    lam_pred = [preds["per-type LSTM"][i * st.interval_min] / 60.0 for i in range(n_int)]
    lam_true = [window[i * st.interval_min:(i + 1) * st.interval_min].mean(0) / 60.0
                for i in range(n_int)]
    mean_rates = hist.mean(0) / 60.0
    # the static plan: the history's mix (capacity scale does not depend on the total rate)
    static = sc_for(mean_rates).plan([r.layout for r in static0.replicas])
    t_plan = time.perf_counter()
    pred_plans = _plans(sc_for, lam_pred, static, st, seed)
    true_plans = _plans(sc_for, lam_true, static, st, seed + 1000)
    plan_s = time.perf_counter() - t_plan
    trace = counts_to_trace(window, k, seed=seed + 7, t0_min=hist_min)
    t_starts = [60.0 * m for m in starts_min]
    systems = {
        "static": ([(t_starts[0], _deployment(static, model, cluster, {}))], "drain"),
        "cold reload": (_schedule(pred_plans, t_starts, model, cluster, "cold", st.cold_reload_s),
                        "cold"),
        "OServe switching": (_schedule(pred_plans, t_starts, model, cluster, "drain",
                                       st.cold_reload_s), "drain"),
        "oracle": (_schedule(true_plans, t_starts, model, cluster, "drain", st.cold_reload_s),
                   "drain"),
    }
    out = {"rrmse": rr, "fit_s": fit_s, "plan_s": plan_s, "n_requests": len(trace),
           "rate_per_min": rate_per_min, "systems": {}, "series": {}, "switches": {}}
    for name, (sched, mode) in systems.items():
        t_sim = time.perf_counter()
        recs, events = simulate_cluster(trace, sched, mode=mode)
        summ = summarize(recs)
        summ["sim_s"] = time.perf_counter() - t_sim
        out["systems"][name] = summ
        out["switches"][name] = [e.time_s for e in events if e.kind == "switch" and e.detail
                                 and not e.detail.startswith("0 replicas out, 0 in")]
        out["series"][name] = (np.array([r.arrival_s for r in recs]),
                               np.array([r.finish_s - r.arrival_s for r in recs]))
        if progress is not None:
            progress()
    out["plans"] = {"static": static.describe(),
                    "predicted": [p.describe() for p in pred_plans],
                    "oracle": [p.describe() for p in true_plans]}
    return out
