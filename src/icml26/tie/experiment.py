"""The scheduling experiment behind the TIE claim: a prompt population, labels, cross-fitted
predictors, and the policy sweep over loads on the simulated engine.

Population (a clearly-labelled *generated proxy*, see docs/tie.md): ``n_prompts`` prompts in six
families (yes/no, list, explain, math, code, story) with per-family log-length centres; each
prompt has a feature vector ``x`` (what an encoder would give) and true log-t parameters
``mu = mu_family + w_mu . x + noise``, ``log sigma = log sigma_family + w_s . x + noise``, so a
predictor can learn them from features but not perfectly. Per prompt, ``n_label`` sampled lengths
(capped at ``cap``, censored) give the offline labels exactly as in the paper: log-t MLE with
nu = 3.5 (TIE), log-normal MLE (TIE-lognormal ablation), sample mean (SSJF) and the same for LTR's
ranking. Requests of the simulated trace draw a prompt uniformly and a *fresh* true length from
that prompt's distribution (held out from the labels).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from icml26.sim.engine import Engine, EngineConfig, FCFSQueue
from icml26.sim.engine import simulate as sim_run
from icml26.sim.metrics import summarize, time_to_finish
from icml26.sim.trace import Request
from icml26.tie.lengths import LogT, fit_lognormal, fit_logt
from icml26.tie.predictor import HeadConfig, LengthPredictor, LTRRanker, SSJFPredictor
from icml26.tie.queue import QueueConfig, TIEQueue
from icml26.tie.score import ScoreTable

__all__ = ["FAMILY_PARAMS", "Population", "make_population", "fit_labels", "crossfit", "POLICIES",
           "ORACLE_ARMS", "make_queue", "make_trace", "run_policy", "RealPopulation",
           "fit_labels_real", "make_trace_real", "schedule_study", "oracle_params",
           "tie_ltr_disagreement"]

# family: (median log length, median log-t sigma)  [generated proxy; LMSYS-like spread]
FAMILY_PARAMS = {"yesno": (1.8, 0.45), "list": (4.6, 0.45), "explain": (5.4, 0.55),
                 "math": (5.0, 0.65), "code": (5.7, 0.75), "story": (6.0, 0.85)}
POLICIES = ("FCFS", "SSJF", "LTR", "SEPT", "TIE-lognormal", "TIE", "oracle SJF", "oracle median", "oracle TIE")
#: the positive-control arms: perfect per-prompt length information (``pop.oracle``)
ORACLE_ARMS = ("oracle median", "oracle TIE")


@dataclass
class Population:
    family: np.ndarray  # (n,) str
    features: np.ndarray  # (n, d) float32
    mu: np.ndarray  # (n,) true log-t mu
    sigma: np.ndarray  # (n,) true log-t sigma
    nu: float
    cap: int
    labels: dict | None = None
    pred: dict | None = None
    oracle: dict | None = None  # per-prompt true mu, sigma, median (the oracle arms)

    def dist(self, i: int) -> LogT:
        return LogT(float(self.mu[i]), float(self.sigma[i]), self.nu)


def make_population(n_prompts: int, dim: int = 32, nu: float = 3.5, cap: int = 2048, seed: int = 0) -> Population:
    """Generated prompt population (see module docstring); deterministic in ``seed``."""
    if n_prompts < 12:
        raise ValueError(f"n_prompts must be >= 12; got {n_prompts}")
    rng = np.random.default_rng(seed)
    fams = list(FAMILY_PARAMS)
    fam = np.array([fams[i % len(fams)] for i in range(n_prompts)])
    centre = rng.normal(0, 1.0, (len(fams), dim))
    fi = np.array([fams.index(f) for f in fam])
    x = centre[fi] + rng.normal(0, 1.0, (n_prompts, dim))
    w_mu, w_s = rng.normal(0, 1, dim), rng.normal(0, 1, dim)
    mu0 = np.array([FAMILY_PARAMS[f][0] for f in fam])
    s0 = np.log([FAMILY_PARAMS[f][1] for f in fam])
    within = x - centre[fi]
    mu = mu0 + 0.45 * np.tanh(within @ w_mu / math.sqrt(dim)) + rng.normal(0, 0.2, n_prompts)
    ls = s0 + 0.3 * np.tanh(within @ w_s / math.sqrt(dim)) + rng.normal(0, 0.1, n_prompts)
    return Population(fam, x.astype(np.float32), mu, np.exp(ls), nu, cap)


def fit_labels(pop: Population, n_label: int, seed: int = 0, progress=None) -> dict:
    """Sample ``n_label`` capped lengths per prompt and fit the offline labels."""
    rng = np.random.default_rng(seed + 1)
    out = {k: np.zeros(len(pop.mu)) for k in ("mu", "sigma", "ln_mu", "ln_sigma", "mean")}
    it = range(len(pop.mu))
    it = progress.track(it, total=len(pop.mu), description="fitting per-prompt labels") if progress else it
    for i in it:
        L, c = pop.dist(i).sample_lengths(rng, n_label, pop.cap)
        if np.unique(L).size == 1:  # degenerate (all equal): nudge one so sigma is identifiable
            L = L.copy()
            L[0] += 1
        t = fit_logt(L, c, nu=3.5)
        ln = fit_lognormal(L, c)
        out["mu"][i], out["sigma"][i] = t.mu, t.sigma
        out["ln_mu"][i], out["ln_sigma"][i] = ln.mu, ln.sigma
        out["mean"][i] = L.mean()
    return out


def _r2(y, yhat) -> float:
    y, yhat = np.asarray(y), np.asarray(yhat)
    return float(1 - ((y - yhat) ** 2).sum() / ((y - y.mean()) ** 2).sum())


def crossfit(pop, labels: dict, folds: int = 5, head: HeadConfig = HeadConfig(), seed: int = 0,
             progress=None) -> tuple[dict, dict]:
    """Out-of-fold predictions for every prompt (split by prompt) from TIE's heads (log-t and
    log-normal labels), SSJF and LTR; returns ``(predictions, r2)``.

    ``r2``: R^2 of the out-of-fold mu and sigma against the labels, overall (``mu``, ``sigma``) and
    within family (``*_within``: 1 - sum of squared errors / sum of squares around each family's
    label mean), for the heads and for the family-mean predictor (``*_family_mean``: each held-out
    prompt gets the mean label of its family in the training folds).
    """
    n = len(labels["mu"])
    perm = np.random.default_rng(seed + 2).permutation(n)
    pred = {k: np.zeros(n) for k in ("mu", "sigma", "ln_mu", "ln_sigma", "ssjf", "ltr")}
    fam_pred = {k: np.zeros(n) for k in ("mu", "sigma")}
    it = range(folds)
    it = progress.track(it, total=folds, description="training predictors (cross-fitted)") if progress else it
    x = pop.features
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny MLPs: one thread is much faster than contended multi-threading
    try:
        _folds(it, perm, folds, x, labels, pred, head)
    finally:
        torch.set_num_threads(threads)
    fam = np.asarray(pop.family)
    for f in range(folds):
        te = perm[f::folds]
        tr = np.setdiff1d(perm, te)
        for k in ("mu", "sigma"):
            for i in te:
                same = tr[fam[tr] == fam[i]]
                fam_pred[k][i] = labels[k][same].mean() if same.size else labels[k][tr].mean()
    r2 = {}
    for k in ("mu", "sigma"):
        r2[k] = _r2(labels[k], pred[k])
        r2[f"{k}_family_mean"] = _r2(labels[k], fam_pred[k])
        r2[f"{k}_within"] = _r2_within(labels[k], pred[k], fam)
        r2[f"{k}_family_mean_within"] = _r2_within(labels[k], fam_pred[k], fam)
    pred["family_mu"], pred["family_sigma"] = fam_pred["mu"], fam_pred["sigma"]
    return pred, r2


def _r2_within(y, yhat, fam) -> float:
    y, yhat = np.asarray(y, float), np.asarray(yhat, float)
    sst = sum(((y[fam == f] - y[fam == f].mean()) ** 2).sum() for f in np.unique(fam))
    return float(1 - ((y - yhat) ** 2).sum() / sst) if sst > 0 else float("nan")


def _folds(it, perm, folds, x, labels, pred, head) -> None:
    for f in it:
        te = perm[f::folds]
        tr = np.setdiff1d(perm, te)
        lp = LengthPredictor(head).fit(x[tr], labels["mu"][tr], labels["sigma"][tr])
        pred["mu"][te], pred["sigma"][te] = lp.predict(x[te])
        ln = LengthPredictor(head).fit(x[tr], labels["ln_mu"][tr], labels["ln_sigma"][tr])
        pred["ln_mu"][te], pred["ln_sigma"][te] = ln.predict(x[te])
        pred["ssjf"][te] = SSJFPredictor(head).fit(x[tr], labels["mean"][tr]).predict(x[te])
        pred["ltr"][te] = LTRRanker(head).fit(x[tr], labels["mean"][tr]).predict(x[te])


def make_trace(pop: Population, n: int, rate: float | None, seed: int, prompt_tokens=(5.0, 0.7)) -> list[Request]:
    """``n`` requests: Poisson arrivals at ``rate`` (None: all at t=0, the offline setting), a
    uniformly drawn prompt, log-normal prompt length, and a fresh true length from the prompt."""
    rng = np.random.default_rng(seed + 100)
    t = np.zeros(n) if rate is None else np.cumsum(rng.exponential(1 / rate, n))
    idx = rng.integers(0, len(pop.mu), n)
    p_len = np.clip(np.ceil(np.exp(rng.normal(*prompt_tokens, n))), 1, 4096).astype(int)
    z = rng.standard_t(pop.nu, n) if math.isfinite(pop.nu) else rng.standard_normal(n)
    L = np.clip(np.ceil(np.exp(np.minimum(pop.mu[idx] + pop.sigma[idx] * z, 50))), 1, pop.cap).astype(int)
    return [Request(i, float(t[i]), int(p_len[i]), int(L[i]), type=str(pop.family[idx[i]]),
                    meta={"prompt": int(idx[i])}) for i in range(n)]


@dataclass
class RealPopulation:
    """Prompts with *sampled* output lengths (see :mod:`icml26.tie.lengthstudy`).

    ``label_lengths`` / ``label_censored``: the samples the offline labels are fitted on;
    ``heldout``: the other samples of the same prompt, from which simulated requests draw their
    true output length; ``prompt_tokens``: the prompt's token count under the chat template."""

    family: np.ndarray
    features: np.ndarray
    label_lengths: list
    label_censored: list
    heldout: list
    prompt_tokens: np.ndarray
    cap: int
    labels: dict | None = None
    pred: dict | None = None
    oracle: dict | None = None  # per-prompt mu, sigma, median from all its samples (the oracle arms)
    table_grid: tuple[int, int] = (512, 128)  # ScoreTable (n_mu, n_sigma); tiny uses a coarser one


def fit_labels_real(lengths: list, censored: list, progress=None) -> dict:
    """The paper's offline labels from sampled lengths: log-t (nu = 3.5) and log-normal MLE
    (censored at the cap), sample mean (SSJF/LTR; a censored length counts as the cap).

    Unidentifiable prompts get a documented nudge: when every sample hit the cap, the first one is
    treated as uncensored (the fit then sits at the cap); when every sample has the same length,
    one sample is moved up by one token (the proxy population does the same)."""
    n = len(lengths)
    out = {k: np.zeros(n) for k in ("mu", "sigma", "ln_mu", "ln_sigma", "mean")}
    out["nudged"] = np.zeros(n, bool)
    it = range(n)
    it = progress.track(it, total=n, description="fitting per-prompt labels") if progress else it
    for i in it:
        L, c = np.asarray(lengths[i], np.int64).copy(), np.asarray(censored[i], bool).copy()
        if c.all():
            c[0] = False
            out["nudged"][i] = True
        if np.unique(L).size == 1:
            j = int(np.argmax(~c))
            L[j] += 1 if not c.any() else -1
            out["nudged"][i] = True
        t, ln = fit_logt(L, c, nu=3.5), fit_lognormal(L, c)
        out["mu"][i], out["sigma"][i] = t.mu, t.sigma
        out["ln_mu"][i], out["ln_sigma"][i] = ln.mu, ln.sigma
        out["mean"][i] = float(np.mean(lengths[i]))
    return out


def make_trace_real(pop: RealPopulation, n: int, rate: float | None, seed: int) -> list[Request]:
    """``n`` requests: Poisson arrivals at ``rate`` (None: all at t = 0), a uniformly drawn
    prompt, its real prompt length, and a true output length drawn from the prompt's *held-out*
    samples (never used for its labels)."""
    rng = np.random.default_rng(seed + 100)
    t = np.zeros(n) if rate is None else np.cumsum(rng.exponential(1 / rate, n))
    idx = rng.integers(0, len(pop.heldout), n)
    out = []
    for i in range(n):
        h = pop.heldout[idx[i]]
        L = int(h[rng.integers(0, len(h))])
        out.append(Request(i, float(t[i]), int(pop.prompt_tokens[idx[i]]), max(1, min(L, pop.cap)),
                           type=str(pop.family[idx[i]]), meta={"prompt": int(idx[i])}))
    return out


@functools.lru_cache(maxsize=8)
def _table(x_max: float, nu: float, grid: tuple[int, int] = (512, 128)) -> ScoreTable:
    return ScoreTable(x_max=x_max, alpha=0.9, nu=nu, n_mu=grid[0], n_sigma=grid[1])


def make_queue(policy: str, pop, max_num_seqs: int, qcfg: QueueConfig):
    """The waiting queue of ``policy`` (one of :data:`POLICIES`)."""
    P = pop.pred
    noage = QueueConfig(**{**qcfg.__dict__, "gamma": 1.0})
    cap = pop.cap
    if policy == "FCFS":
        return FCFSQueue()
    if policy == "oracle SJF":
        return TIEQueue(lambda r, q: r.output_tokens, QueueConfig(**{**noage.__dict__, "predict_wait_s": 0.0}))
    if policy == "SSJF":
        return TIEQueue(lambda r, q: min(P["ssjf"][r.meta["prompt"]], cap), noage)
    if policy == "LTR":
        lo = P["ltr"].min()  # ranker scores are shifted positive (order unchanged) below the x_max placeholder
        span = P["ltr"].max() - lo + 1e-9
        return TIEQueue(lambda r, q: 1 + (cap - 2) * (P["ltr"][r.meta["prompt"]] - lo) / span, noage)
    if policy == "oracle median":
        med = pop.oracle["median"]
        return TIEQueue(lambda r, q: min(float(med[r.meta["prompt"]]), cap), noage)
    if policy in ("TIE", "SEPT", "TIE-lognormal", "oracle TIE"):
        ln = policy == "TIE-lognormal"
        src = pop.oracle if policy == "oracle TIE" else P
        mu, sg = (P["ln_mu"], P["ln_sigma"]) if ln else (src["mu"], src["sigma"])
        nu = math.inf if ln else 3.5
        beta = 0.0 if policy == "SEPT" else None
        table = _table(float(cap), nu, getattr(pop, "table_grid", (512, 128)))  # exact expectations interpolated (ScoreTable), not 10k MC
        return TIEQueue(lambda r, q: table(mu[r.meta["prompt"]], sg[r.meta["prompt"]], q, max_num_seqs, beta), qcfg)
    raise ValueError(f"unknown policy {policy!r}; choose from {', '.join(POLICIES)}")


def run_policy(policy: str, pop, trace: list[Request], cost, engine_cfg: EngineConfig,
               qcfg: QueueConfig, finish_n: int | None = None) -> dict:
    """``summarize`` of one simulated run, plus ``ptla_items``: every request's PTLA in request-id
    order (the same requests for every policy on a trace, so policies pair item by item)."""
    eng = Engine(engine_cfg, cost, make_queue(policy, pop, engine_cfg.max_num_seqs, qcfg))
    recs = sim_run(trace, eng)
    out = summarize(recs)
    out["ptla_items"] = [(r.finish_s - r.arrival_s) / r.output_tokens
                         for r in sorted(recs, key=lambda r: r.id)]
    if finish_n:
        out["time_to_finish_s"] = time_to_finish(recs, finish_n)
    return out


def oracle_params(lengths: list, censored: list, cap: int) -> dict:
    """The oracle arms' per-prompt parameters from the samples the simulated requests draw their
    true lengths from (a real population's *held-out* samples): log-t (nu = 3.5) MLE mu, sigma
    (:func:`fit_labels_real`, censored at the cap) and the sample median."""
    fit = fit_labels_real(lengths, censored)
    med = np.array([min(float(np.median(L)), cap) for L in lengths])
    return {"mu": fit["mu"], "sigma": fit["sigma"], "median": med}


def tie_ltr_disagreement(pop, x_max: float, max_num_seqs: int = 32) -> tuple[int, int]:
    """Prompt pairs that TIE (predicted mu, sigma) and LTR rank in opposite order, at *both* ends
    of TIE's adaptive beta (0.1 and 0.5): ``(discordant, total)``."""
    P = pop.pred
    table = _table(float(x_max), 3.5, getattr(pop, "table_grid", (512, 128)))
    ltr = np.asarray(P["ltr"], float)
    lo = table(P["mu"], P["sigma"], beta=0.1)
    hi = table(P["mu"], P["sigma"], beta=0.5)
    i, j = np.triu_indices(len(ltr), 1)
    s_l = np.sign(ltr[i] - ltr[j])
    both = (np.sign(lo[i] - lo[j]) * s_l < 0) & (np.sign(hi[i] - hi[j]) * s_l < 0)
    return int(both.sum()), int(len(i))


def schedule_study(pop, trace_fn, n_req: int, loads, n_seeds: int, seed: int, x_max: float,
                   progress=None) -> dict:
    """The claim's scheduling experiment, shared by the SmolLM2 and the proxy populations.

    Llama-3-8B roofline on one H100 (max_num_seqs 32, 8,192 batched tokens, paged KV); FCFS
    capacity = requests finished per second until half of ``n_req`` all-waiting requests are done
    (the drain at the end excluded); then, per load (fraction of that capacity) and seed, every
    policy of :data:`POLICIES` on the same Poisson trace. ``trace_fn(pop, n, rate, seed)`` makes
    a trace (``rate=None``: all arrive at t = 0). Returns ``table``/``p90``/``ttft``
    ({(policy, load): [per seed]}), ``items`` ({(policy, load): [per seed: per-request PTLA]}), ``offline`` (per policy, time to finish 75%), ``capacity``
    (req/s) and ``engine`` (the EngineConfig).
    """
    from icml26.sim.cost import HardwareSpec, ModelSpec, RooflineCost

    cost = RooflineCost(ModelSpec.llama3_8b(), HardwareSpec.h100())
    ecfg = EngineConfig(max_num_seqs=32, max_num_batched_tokens=8192, kv_tokens=cost.kv_capacity_tokens())
    qcfg = QueueConfig(x_max=x_max)
    tick = progress.task("simulating", total=len(POLICIES) * (1 + n_seeds * len(loads))) if progress \
        else (lambda k: None)
    offline_tr = trace_fn(pop, n_req, None, seed=seed)
    offline = {}
    for p in POLICIES:
        offline[p] = run_policy(p, pop, offline_tr, cost, ecfg, qcfg, finish_n=int(0.75 * n_req))
        tick(1)
    half = run_policy("FCFS", pop, offline_tr, cost, ecfg, qcfg, finish_n=n_req // 2)["time_to_finish_s"]
    capacity = (n_req // 2) / half
    table, p90, ttft, items = {}, {}, {}, {}
    for ld in loads:
        for s in range(n_seeds):
            tr = trace_fn(pop, n_req, ld * capacity, seed=seed * 1000 + s)
            for p in POLICIES:
                m = run_policy(p, pop, tr, cost, ecfg, qcfg)
                table.setdefault((p, ld), []).append(m["ptla_mean"])
                p90.setdefault((p, ld), []).append(m["ptla_p90"])
                ttft.setdefault((p, ld), []).append(m["ttft_mean"])
                items.setdefault((p, ld), []).append(m["ptla_items"])
                tick(1)
    return {"table": table, "p90": p90, "ttft": ttft, "items": items, "offline": offline,
            "capacity": capacity, "engine": ecfg}


def plot_ptla_vs_load(ax, loads, table: dict, title: str, title_size: float | None = None) -> None:
    """Mean PTLA per policy against load on ``ax``, min-max over seeds as error bars
    (``table[(policy, load)]`` = per-seed mean PTLA); used by both TIE claims."""
    for p in POLICIES:
        m = np.array([np.mean(table[(p, ld)]) for ld in loads])
        lo = np.array([np.min(table[(p, ld)]) for ld in loads])
        hi = np.array([np.max(table[(p, ld)]) for ld in loads])
        ax.errorbar(loads, m, yerr=[m - lo, hi - m], marker="o", capsize=3, label=p,
                    lw=2.5 if p == "TIE" else 1.2)
    ax.set_xlabel("load (fraction of FCFS capacity)")
    ax.set_ylabel("mean per-token latency PTLA (s)")
    ax.set_yscale("log")
    ax.set_title(title, fontsize=title_size)
    ax.legend(fontsize=8)
