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

Serving regime (issue 34): a replica with ``max_num_seqs`` 256 and a real KV limit
(:class:`ServeSetup`, default Llama-3-8B on one A100-40GB through :class:`icml26.sim.ReplicaCost`),
finite overload bursts (:class:`Regime`), and the oracle arms (true median, the E[S]/E[1/S]
index, TIE's own score on the true (mu, sigma), SJF on the true length) in every run.
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
from icml26.tie.score import ScoreTable, exchange_index

__all__ = ["FAMILY_PARAMS", "Population", "make_population", "fit_labels", "crossfit", "POLICIES",
           "ORACLE_ARMS", "make_queue", "make_trace", "run_policy", "RealPopulation",
           "fit_labels_real", "make_trace_real", "schedule_study", "oracle_params",
           "tie_ltr_disagreement", "ServeSetup", "Regime", "arrival_times", "spearman",
           "rank_metrics", "oracle_proxy"]

# family: (median log length, median log-t sigma)  [generated proxy; LMSYS-like spread]
FAMILY_PARAMS = {"yesno": (1.8, 0.45), "list": (4.6, 0.45), "explain": (5.4, 0.55),
                 "math": (5.0, 0.65), "code": (5.7, 0.75), "story": (6.0, 0.85)}
POLICIES = ("FCFS", "SSJF", "LTR", "SEPT", "TIE-lognormal", "TIE", "oracle SJF", "oracle median",
            "oracle index", "oracle TIE")
#: the positive-control arms: perfect per-prompt distribution knowledge (``pop.oracle``) ranked by
#: the true median (LTR's ideal) and by the exchange index E[S]/E[1/S] (the optimal fixed order for
#: mean per-token latency on one server). "oracle TIE" (TIE's score on the true (mu, sigma)) is
#: not a control: it is the method with perfect inputs, and separates the score from the predictor.
ORACLE_ARMS = ("oracle median", "oracle index")


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


def make_trace(pop: Population, n: int, rate: float | None, seed: int, prompt_tokens=(5.0, 0.7),
               times=None) -> list[Request]:
    """``n`` requests: Poisson arrivals at ``rate`` (None: all at t=0, the offline setting) or at
    the given arrival ``times`` (s), a uniformly drawn prompt, log-normal prompt length, and a
    fresh true length from the prompt."""
    rng = np.random.default_rng(seed + 100)
    t = _times(rng, n, rate, times)
    idx = rng.integers(0, len(pop.mu), n)
    p_len = np.clip(np.ceil(np.exp(rng.normal(*prompt_tokens, n))), 1, 4096).astype(int)
    z = rng.standard_t(pop.nu, n) if math.isfinite(pop.nu) else rng.standard_normal(n)
    L = np.clip(np.ceil(np.exp(np.minimum(pop.mu[idx] + pop.sigma[idx] * z, 50))), 1, pop.cap).astype(int)
    return [Request(i, float(t[i]), int(p_len[i]), int(L[i]), type=str(pop.family[idx[i]]),
                    meta={"prompt": int(idx[i])}) for i in range(n)]


def _times(rng, n: int, rate, times) -> np.ndarray:
    if times is not None:
        t = np.asarray(times, float)
        if t.shape != (n,):
            raise ValueError(f"times must have one arrival per request ({n}); got shape {t.shape}")
        rng.exponential(1.0, n)  # keep the draws after it (prompts, lengths) the same as with a rate
        return t
    return np.zeros(n) if rate is None else np.cumsum(rng.exponential(1 / rate, n))


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


def make_trace_real(pop: RealPopulation, n: int, rate: float | None, seed: int, times=None) -> list[Request]:
    """``n`` requests: Poisson arrivals at ``rate`` (None: all at t = 0) or at ``times``, a
    uniformly drawn prompt, its real prompt length, and a true output length drawn from the
    prompt's *held-out* samples (never used for its labels)."""
    rng = np.random.default_rng(seed + 100)
    t = _times(rng, n, rate, times)
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
    if policy == "oracle index":  # E[S]/E[1/S] (<= cap^2): mapped monotonically below the x_max placeholder
        idx = np.sqrt(np.asarray(pop.oracle["index"], float))
        return TIEQueue(lambda r, q: min(float(idx[r.meta["prompt"]]), cap - 1), noage)
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
    """``summarize`` of one simulated run (``preemptions`` counts recompute preemptions), plus
    ``preempted_requests`` (requests preempted at least once), ``rejected`` (dropped: larger than
    the whole KV cache) and ``ptla_items``: every served request's PTLA in request-id order (the
    same requests for every policy on a trace, so policies pair item by item)."""
    eng = Engine(engine_cfg, cost, make_queue(policy, pop, engine_cfg.max_num_seqs, qcfg))
    recs = sim_run(trace, eng)
    out = summarize(recs)
    out["preempted_requests"] = int(sum(r.preemptions > 0 for r in recs))
    out["rejected"] = len(eng.rejected)
    out["ptla_items"] = [(r.finish_s - r.arrival_s) / r.output_tokens
                         for r in sorted(recs, key=lambda r: r.id)]
    if finish_n:
        out["time_to_finish_s"] = time_to_finish(recs, finish_n)
    return out


def oracle_params(lengths: list, censored: list, cap: int) -> dict:
    """The oracle arms' per-prompt parameters from the samples the simulated requests draw their
    true lengths from (a real population's *held-out* samples): log-t (nu = 3.5) MLE mu, sigma
    (:func:`fit_labels_real`, censored at the cap), the sample median, and the exchange index
    ``mean(S) / mean(1/S)`` of those samples (``S`` clipped to ``[1, cap]``, as the trace serves
    them: the exact E[S]/E[1/S] of the draw)."""
    fit = fit_labels_real(lengths, censored)
    med = np.array([min(float(np.median(L)), cap) for L in lengths])
    idx = np.array([float(np.mean(S)) / float(np.mean(1.0 / S))
                    for S in (np.clip(np.asarray(L, float), 1, cap) for L in lengths)])
    return {"mu": fit["mu"], "sigma": fit["sigma"], "median": med, "index": idx}


def oracle_proxy(pop: Population) -> dict:
    """The oracle arms' parameters of the generated population: its true (mu, sigma), the median
    ``exp(mu)`` (capped) and the exchange index E[S]/E[1/S] of ``S = min(max(X, 1), cap)`` by
    quadrature (:func:`icml26.tie.score.exchange_index`)."""
    return {"mu": pop.mu, "sigma": pop.sigma, "median": np.minimum(np.exp(pop.mu), pop.cap),
            "index": exchange_index(pop.mu, pop.sigma, pop.nu, float(pop.cap), 1.0)}


def spearman(a, b) -> float:
    """Spearman's rank correlation: Pearson's r of the ranks, ties given their average rank
    (nan when either side is constant)."""
    from scipy.stats import rankdata

    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"spearman needs two 1-d arrays of one length; got {a.shape} and {b.shape}")
    ra, rb = rankdata(a), rankdata(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = math.sqrt(float((ra * ra).sum() * (rb * rb).sum()))
    return float((ra * rb).sum() / den) if den > 0 else float("nan")


def rank_metrics(pred: dict, labels: dict, heldout_mean, cap: float) -> dict:
    """Spearman rho of each predictor's per-prompt length against ``heldout_mean`` (each prompt's
    mean length on samples never used for its labels): TIE's heads (the predicted truncated mean
    E[min(X, cap)] of (mu, sigma)), SSJF (predicted mean), LTR (ranker score), and the labels
    themselves (the truncated mean of the label fit: the ceiling a predictor of the labels can
    reach)."""
    from icml26.tie.score import truncated_mean

    sg = lambda x: np.maximum(np.asarray(x, float), 1e-6)  # noqa: E731
    return {"TIE heads": spearman(truncated_mean(pred["mu"], sg(pred["sigma"]), 3.5, cap), heldout_mean),
            "SSJF": spearman(pred["ssjf"], heldout_mean), "LTR": spearman(pred["ltr"], heldout_mean),
            "labels": spearman(truncated_mean(labels["mu"], sg(labels["sigma"]), 3.5, cap), heldout_mean)}


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


_GPUS = {"a100-40gb": ("A100-SXM", 312e12, 1.555e12, 40e9), "a100-80gb": ("A100-SXM", 312e12, 2.039e12, 80e9),
         "h100": ("H100-SXM", 989e12, 3.35e12, 80e9), "h200": ("H200", 989e12, 4.8e12, 141e9)}
_MODELS = {"llama3-8b": ("Llama-3-8B", 32, 4096, 32, 8, 14336, 128256),
           "llama2-7b": ("Llama-2-7B", 32, 4096, 32, 32, 11008, 32000),
           "llama2-13b": ("Llama-2-13B", 40, 5120, 40, 40, 13824, 32000)}


@dataclass(frozen=True)
class ServeSetup:
    """The simulated replica: ``model`` on one ``gpu`` (names in ``_MODELS`` / ``_GPUS``) priced by
    :class:`icml26.sim.ReplicaCost`, KV capacity from ``gpu_memory_utilization``, ``max_num_seqs``
    (vLLM's default 256) and ``max_num_batched_tokens`` from the scaled rule
    (:meth:`~icml26.sim.ReplicaCost.engine_config`), oversize requests dropped and counted.

    The default, Llama-3-8B (the paper's size) on one A100-40GB at 0.9, holds ~150k KV tokens:
    256 sequences at the populations' mean context do not all fit, so long ("runaway") requests
    trigger recompute preemption. ``legacy=True`` is the earlier engine (constant-MFU
    ``RooflineCost`` on one H100, max_num_seqs 32, ~450k KV tokens: no KV pressure).
    """

    model: str = "llama3-8b"
    gpu: str = "a100-40gb"
    gpu_memory_utilization: float = 0.9
    max_num_seqs: int = 256
    legacy: bool = False

    def __post_init__(self) -> None:
        if self.model not in _MODELS:
            raise ValueError(f"unknown model {self.model!r}; choose from {', '.join(_MODELS)}")
        if self.gpu not in _GPUS:
            raise ValueError(f"unknown gpu {self.gpu!r}; choose from {', '.join(_GPUS)}")
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1; got {self.max_num_seqs}")

    def build(self):
        """``(cost, EngineConfig)``."""
        from icml26.sim.cost import HardwareSpec, ModelSpec, RooflineCost

        if self.legacy:
            cost = RooflineCost(ModelSpec.llama3_8b(), HardwareSpec.h100())
            return cost, EngineConfig(max_num_seqs=32, max_num_batched_tokens=8192,
                                      kv_tokens=cost.kv_capacity_tokens())
        from icml26.sim.replica import ReplicaCost

        cost = ReplicaCost(ModelSpec(*_MODELS[self.model]), HardwareSpec(*_GPUS[self.gpu]),
                           gpu_memory_utilization=self.gpu_memory_utilization)
        return cost, cost.engine_config(max_num_seqs=self.max_num_seqs, oversize="drop")

    def describe(self) -> str:
        if self.legacy:
            return "legacy: Llama-3-8B constant-MFU roofline on one H100, max_num_seqs 32"
        return (f"{_MODELS[self.model][0]} on one {self.gpu.upper()} (ReplicaCost, gpu_memory_utilization "
                f"{self.gpu_memory_utilization}), max_num_seqs {self.max_num_seqs}")


@dataclass(frozen=True)
class Regime:
    """How a trace's arrivals follow its load ``L`` (a fraction of FCFS capacity).

    ``finite`` (default): the whole finite trace arrives as a Poisson stream at ``L`` x capacity,
    then the backlog drains: with ``L > 1`` the trace *is* one overload burst, like the paper's
    replay of LMSYS at a fixed 100 RPS. ``burst``: Poisson at ``min(base, L)`` x capacity, except
    the requests from ``start`` to ``start + width`` (fractions of the trace), which arrive at
    ``L`` x capacity; after the window the rate falls back and the backlog drains."""

    kind: str = "finite"
    base: float = 0.7
    start: float = 0.2
    width: float = 0.5

    def __post_init__(self) -> None:
        if self.kind not in ("finite", "burst"):
            raise ValueError(f"regime must be 'finite' or 'burst'; got {self.kind!r}")
        if not (self.base > 0 and 0 <= self.start < 1 and 0 < self.width <= 1 - self.start):
            raise ValueError(f"bad burst window: base {self.base}, start {self.start}, width {self.width} "
                             "(need base > 0, 0 <= start < 1, 0 < width <= 1 - start)")

    def describe(self) -> str:
        if self.kind == "finite":
            return "one finite Poisson trace at the load, then the drain"
        return (f"overload burst: base load {self.base}, the requests {self.start:.0%}-"
                f"{self.start + self.width:.0%} of the trace at the load")


def arrival_times(n: int, capacity: float, load: float, regime: Regime, seed: int) -> np.ndarray:
    """``n`` arrival times (s) for ``load`` x ``capacity`` req/s under ``regime``."""
    if not (capacity > 0 and load > 0):
        raise ValueError(f"capacity and load must be > 0; got {capacity}, {load}")
    rng = np.random.default_rng(seed + 7)
    rate = np.full(n, load * capacity)
    if regime.kind == "burst":
        i = np.arange(n)
        inside = (i >= regime.start * n) & (i < (regime.start + regime.width) * n)
        rate = np.where(inside, load, min(regime.base, load)) * capacity
    return np.cumsum(rng.exponential(1.0, n) / rate)


def schedule_study(pop, trace_fn, n_req: int, loads, n_seeds: int, seed: int, x_max: float,
                   progress=None, setup: ServeSetup = ServeSetup(), regime: Regime = Regime(),
                   policies=POLICIES) -> dict:
    """The claim's scheduling experiment, shared by the SmolLM2, population and proxy claims.

    One replica (``setup``); FCFS capacity = requests finished per second until half of
    ``n_req`` all-waiting requests are done (the drain at the end excluded); then, per load
    (fraction of that capacity, arrivals by ``regime``) and seed, every policy on the same trace.
    ``trace_fn(pop, n, rate, seed, times=None)`` makes a trace (``rate=None``: all at t = 0).
    Returns ``table``/``p90``/``ttft`` ({(policy, load): [per seed]}), ``items`` (per-request
    PTLA, request-id order), ``preempt`` / ``preempted`` / ``rejected`` ({(policy, load): [per
    seed: preemptions, requests preempted at least once, requests dropped as larger than the KV
    cache]}), ``offline`` (per policy, time to finish 75%), ``capacity`` (req/s), ``engine`` (the
    EngineConfig), ``setup`` and ``regime``.
    """
    cost, ecfg = setup.build()
    qcfg = QueueConfig(x_max=x_max)
    tick = progress.task("simulating", total=len(policies) * (1 + n_seeds * len(loads))) if progress \
        else (lambda k: None)
    offline_tr = trace_fn(pop, n_req, None, seed=seed)
    offline = {}
    for p in policies:
        offline[p] = run_policy(p, pop, offline_tr, cost, ecfg, qcfg, finish_n=int(0.75 * n_req))
        tick(1)
    half = run_policy("FCFS", pop, offline_tr, cost, ecfg, qcfg, finish_n=n_req // 2)["time_to_finish_s"]
    capacity = (n_req // 2) / half
    out = {k: {} for k in ("table", "p90", "ttft", "items", "preempt", "preempted", "rejected")}
    for ld in loads:
        for s in range(n_seeds):
            tr_seed = seed * 1000 + s
            tr = trace_fn(pop, n_req, ld * capacity, seed=tr_seed,
                          times=arrival_times(n_req, capacity, ld, regime, tr_seed))
            for p in policies:
                m = run_policy(p, pop, tr, cost, ecfg, qcfg)
                for k, v in (("table", m["ptla_mean"]), ("p90", m["ptla_p90"]), ("ttft", m["ttft_mean"]),
                             ("items", m["ptla_items"]), ("preempt", m["preemptions"]),
                             ("preempted", m["preempted_requests"]), ("rejected", m["rejected"])):
                    out[k].setdefault((p, ld), []).append(v)
                tick(1)
    return out | {"offline": offline, "capacity": capacity, "engine": ecfg, "setup": setup, "regime": regime,
                  "policies": tuple(policies)}


def plot_ptla_vs_load(ax, loads, table: dict, title: str, title_size: float | None = None,
                      policies=POLICIES) -> None:
    """Mean PTLA per policy against load on ``ax``, min-max over seeds as error bars
    (``table[(policy, load)]`` = per-seed mean PTLA); used by both TIE claims."""
    for p in policies:
        m = np.array([np.mean(table[(p, ld)]) for ld in loads])
        lo = np.array([np.min(table[(p, ld)]) for ld in loads])
        hi = np.array([np.max(table[(p, ld)]) for ld in loads])
        ax.errorbar(loads, m, yerr=[m - lo, hi - m], marker="o", capsize=3, label=p,
                    lw=2.5 if p == "TIE" else 1.2, ls="--" if p.startswith("oracle") else "-")
    ax.set_xlabel("load (fraction of FCFS capacity)")
    ax.set_ylabel("mean per-token latency PTLA (s)")
    ax.set_yscale("log")
    ax.set_title(title, fontsize=title_size)
    ax.legend(fontsize=8)
