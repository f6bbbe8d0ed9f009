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
from icml26.tie.score import tie_score

__all__ = ["FAMILY_PARAMS", "Population", "make_population", "fit_labels", "crossfit", "POLICIES",
           "make_queue", "make_trace", "run_policy"]

# family: (median log length, median log-t sigma)  [generated proxy; LMSYS-like spread]
FAMILY_PARAMS = {"yesno": (1.8, 0.45), "list": (4.6, 0.45), "explain": (5.4, 0.55),
                 "math": (5.0, 0.65), "code": (5.7, 0.75), "story": (6.0, 0.85)}
POLICIES = ("FCFS", "SSJF", "LTR", "SEPT", "TIE-lognormal", "TIE", "oracle SJF")


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


def crossfit(pop: Population, labels: dict, folds: int = 5, head: HeadConfig = HeadConfig(), seed: int = 0,
             progress=None) -> tuple[dict, dict]:
    """Out-of-fold predictions for every prompt (split by prompt) from TIE's heads (log-t and
    log-normal labels), SSJF and LTR; returns ``(predictions, r2)`` with R^2 of mu and sigma
    against the labels, overall and against a family-mean predictor."""
    n = len(pop.mu)
    perm = np.random.default_rng(seed + 2).permutation(n)
    pred = {k: np.zeros(n) for k in ("mu", "sigma", "ln_mu", "ln_sigma", "ssjf", "ltr")}
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
    fam_mu = {f: labels["mu"][pop.family == f].mean() for f in FAMILY_PARAMS}
    fam_s = {f: labels["sigma"][pop.family == f].mean() for f in FAMILY_PARAMS}
    r2 = {"mu": _r2(labels["mu"], pred["mu"]), "sigma": _r2(labels["sigma"], pred["sigma"]),
          "mu_family_mean": _r2(labels["mu"], [fam_mu[f] for f in pop.family]),
          "sigma_family_mean": _r2(labels["sigma"], [fam_s[f] for f in pop.family])}
    return pred, r2


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


def make_queue(policy: str, pop: Population, max_num_seqs: int, qcfg: QueueConfig):
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
    if policy in ("TIE", "SEPT", "TIE-lognormal"):
        ln = policy == "TIE-lognormal"
        mu, sg = (P["ln_mu"], P["ln_sigma"]) if ln else (P["mu"], P["sigma"])
        nu = math.inf if ln else 3.5
        beta = 0.0 if policy == "SEPT" else None
        return TIEQueue(lambda r, q: tie_score(mu[r.meta["prompt"]], sg[r.meta["prompt"]], q, max_num_seqs,
                                               cap, 0.9, nu, beta), qcfg)
    raise ValueError(f"unknown policy {policy!r}; choose from {', '.join(POLICIES)}")


def run_policy(policy: str, pop: Population, trace: list[Request], cost, engine_cfg: EngineConfig,
               qcfg: QueueConfig, finish_n: int | None = None) -> dict:
    eng = Engine(engine_cfg, cost, make_queue(policy, pop, engine_cfg.max_num_seqs, qcfg))
    recs = sim_run(trace, eng)
    out = summarize(recs)
    if finish_n:
        out["time_to_finish_s"] = time_to_finish(recs, finish_n)
    return out
