"""The ECHO experiment: greedy continuations, exact replay of every policy, modelled throughput.

Measured (real models, CPU): the target's greedy continuations, the draft's trees and the
acceptance of every policy (tokens emitted per verification, tree sizes, verified per accepted),
cached per (models, sizes) so that reruns and the modelled sweep do not recompute them.
Modelled: seconds per iteration from a :class:`~icml26.echo.cost.SpecCost` factory (default: an
8B Llama-3 target on one H100 with an EAGLE-3-like head on ``ReplicaCost``), at every batch size,
with each baseline tuned per batch size on the calibration prompts and a one-at-a-time
sensitivity band over the cost model's assumptions.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from icml26.core.stats import bracket
from icml26.echo.calibrate import GateCalibration, calibrate_gates, gate_statistics
from icml26.echo.cost import SENSITIVITY, SpecCost, replica_spec_cost
from icml26.echo.decode import SpeculativeDecoder
from icml26.echo.draft import choose_exit_layer, exit_layer_agreement
from icml26.echo.model import TreeLM
from icml26.echo.policies import AR, AdaptiveChain, DenseDynamic, Echo, Policy, StaticTree
from icml26.echo.prompts import echo_prompts
from icml26.echo.replay import ReplaySet, make_groups, replay_positions

__all__ = ["ExperimentConfig", "chat_ids", "greedy_continuations", "run_experiment", "live_decoding", "BASELINES",
           "ORACLE", "oracle_chain", "tree_differences", "static_shape", "measure_traces"]

#: the baselines of the headline: two published static shapes and three arms tuned per batch size
BASELINES = ("StaticTree", "StaticTree-SGLang", "StaticTree (tuned)", "DenseDynamic (tuned)", "AdaptiveChain (tuned)")
ECHO_VARIANTS = ("Echo", "Echo (single tau)", "Echo (dense gates)", "Echo (no gates)")


@dataclass(frozen=True)
class ExperimentConfig:
    """Sizes of one ECHO replay experiment (see docs/echo.md for the defaults' sources).

    batch_sizes, headline_b : the modelled batch sizes and the headline's. tune_cap,
    tune_extend : the bracketing tuner's extensions (the same budget for every tuned arm).
    sensitivity : run the one-at-a-time cost-model band (:data:`~icml26.echo.cost.SENSITIVITY`).
    """

    n_prompts: int = 24
    n_calib: int = 8
    max_new_tokens: int = 64
    stride: int = 4
    depth: int = 8
    topk: int = 10
    total: int = 60
    batch_sizes: tuple[int, ...] = (1, 8, 32, 128, 256)
    headline_b: int = 32
    exit_layer: int | None = None
    agreement_target: float = 0.5
    auc_min: float = 0.6
    max_gates: int = 2
    context: int = 1024
    n_boot: int = 30
    gen_batch: int = 8
    live_prompts: int = 8
    live_tokens: int = 48
    live_batch_sizes: tuple[int, ...] = (1, 8)
    tune_extend: int = 2
    tune_cap: int = 2
    sensitivity: bool = True
    seed: int = 0

    def __post_init__(self):
        for f in ("n_prompts", "n_calib", "max_new_tokens", "stride", "depth", "topk", "total", "gen_batch",
                  "live_prompts", "live_tokens", "tune_extend"):
            if getattr(self, f) < 1:
                raise ValueError(f"ExperimentConfig.{f} must be >= 1; got {getattr(self, f)}")
        if not self.live_batch_sizes or min(self.live_batch_sizes) < 1:
            raise ValueError(f"live_batch_sizes must be non-empty and >= 1; got {self.live_batch_sizes}")
        if self.headline_b not in self.batch_sizes:
            raise ValueError(f"headline_b={self.headline_b} must be one of batch_sizes {self.batch_sizes}")
        if not 0 < self.agreement_target < 1:
            raise ValueError(f"agreement_target must be in (0, 1); got {self.agreement_target}")


def chat_ids(tok, text: str) -> list[int]:
    """Token ids of a one-turn chat prompt (the tokenizer's chat template, if it has one)."""
    if getattr(tok, "chat_template", None):
        out = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        out = out["input_ids"] if hasattr(out, "keys") else out
        return [int(x) for x in out]
    return [int(x) for x in tok(text)["input_ids"]]


def greedy_continuations(lm: TreeLM, prompts: list[list[int]], max_new_tokens: int, batch: int,
                         eos: int | None, progress=None, memo=None) -> list[list[int]]:
    """The target's greedy continuations, decoded in batches (AR trees, no padding bucket);
    ``memo`` (a :class:`~icml26.core.checkpoint.Memo`) stores each finished batch (resumable)."""
    dec = SpeculativeDecoder(lm, 1, AR(), k_max=batch, bucket=1)
    starts = list(range(0, len(prompts), batch))
    it = starts
    if progress is not None:
        it = progress.track(starts, total=len(starts), description="echo: greedy continuations")
    out = []
    for i in it:
        c = prompts[i:i + batch]
        run = lambda c=c: dec.generate(c, max_new_tokens, batch_size=len(c), eos_token_id=eos).tokens  # noqa: E731
        out += memo.compute(f"continuations/{i}", run) if memo is not None else run()
    return out


def shared_topk(cfg_topk: int, k_max: int, b: int) -> int:
    """Beam width of the budgeted policies at batch ``b``: the per-request budget share
    ``ceil(k_max / b)``, clipped to [1, ``cfg_topk``] (the same rule for every budgeted policy)."""
    return int(min(cfg_topk, max(1, math.ceil(k_max / b))))


def reach_depth(k_max: int, b: int, depth: int) -> int:
    """The draft depth an even budget share lets a request reach: ``ceil(k_max / b) - 1`` (root
    excluded), clipped to [1, ``depth``]; ECHO's gate depths are calibrated among these depths."""
    return int(min(depth, max(1, math.ceil(k_max / b) - 1)))


def static_shape(n: int, depth_cap: int = 8, name: str = "StaticTree (tuned)") -> StaticTree:
    """The static tree with ``n`` draft tokens (SGLang's ``num_draft_tokens``): ``depth =
    round(log2 n + 2)`` steps (5 at 8 tokens, 8 at 60: SGLang's high-load default and EAGLE-3's),
    clipped to [1, ``depth_cap``], top-k 4 up to 16 tokens (SGLang) and 10 above (EAGLE-3)."""
    n = max(1, int(n))
    depth = int(min(depth_cap, max(1, round(math.log2(n) + 2))))
    return StaticTree(depth=depth, topk=4 if n <= 16 else 10, total=n, name=name)


def echo_variants(cfg: ExperimentConfig, cal: GateCalibration, topk: int) -> list[Policy]:
    """Echo and its ablations (one tau, a gate at every depth, no gates) with calibration ``cal``."""
    lim = {"depth": cfg.depth, "topk": topk, "total": cfg.total}
    return [Echo(gate_depths=cal.gate_depths, taus=cal.taus, **lim),
            Echo(gate_depths=cal.gate_depths, taus=(cal.single_tau,) * len(cal.gate_depths),
                 name="Echo (single tau)", **lim),
            Echo(gate_depths=tuple(range(1, cfg.depth + 1)), taus=cal.dense_taus, name="Echo (dense gates)", **lim),
            Echo(gate_depths=(), taus=(), name="Echo (no gates)", **lim)]


ORACLE = "Oracle draft (acceptance 1)"


def oracle_chain(depth: int, b: int, k_max: int, cost: SpecCost) -> dict:
    """The positive control: a draft that is always right (acceptance 1). Each of ``b`` requests
    verifies a chain of its share of ``k_max`` (split evenly, at most ``depth`` + 1 tokens, root
    included) and emits all of it; the draft runs one node per draft step. Modelled tokens/s."""
    sizes = [min(depth + 1, k_max // b + (1 if i < k_max % b else 0)) for i in range(b)]
    sec = cost.draft_time([[1] * (k - 1) for k in sizes]) + cost.verify_time(sizes)
    return {"MAT": sum(sizes) / b, "mean K_i": sum(sizes) / b, "verified/accepted": 1.0,
            "tokens/s (modelled)": sum(sizes) / sec}


def tree_differences(a: list, b: list) -> int:
    """Request slots (same iteration, same request) whose tree records differ between two
    policies: records are (accepted, K_i, draft nodes per step)."""
    if len(a) != len(b):
        raise ValueError(f"tree records of different lengths: {len(a)} vs {len(b)}")
    return sum(x != y for x, y in zip(a, b, strict=True))


def _simulate(rs: ReplaySet, pol: Policy, groups, k_max: int, cost: SpecCost, keep: list | None = None):
    """Per-iteration (tokens, seconds, verified, requests) arrays for one policy; ``keep`` (a list)
    collects each request slot's tree record (accepted, K_i, draft nodes per step)."""
    tok, sec, ver, n = [], [], [], []
    if isinstance(pol, AR):
        for g in groups:
            tok.append(len(g))
            sec.append(cost.ar_time(len(g)))
            ver.append(len(g))
            n.append(len(g))
    else:
        for r in rs.run(pol, groups, k_max):
            if keep is not None:
                keep += [[a, k, list(e)] for a, k, e in zip(r.accepted, r.sizes, r.expanded, strict=True)]
            tok.append(sum(r.accepted))
            sec.append(cost.draft_time(r.expanded) + cost.verify_time(r.sizes))
            ver.append(sum(r.sizes))
            n.append(len(r.sizes))
    return np.array(tok, float), np.array(sec), np.array(ver, float), np.array(n, float)


def _groups(samples: list[int], b: int, seed: int) -> list[list[int]]:
    g = make_groups(len(samples), b, max(3, math.ceil(2 * len(samples) / b)), seed)
    return [[samples[j] for j in x] for x in g]


def _tps(rs, pol, groups, k_max, cost) -> float:
    tk, sec, _, _ = _simulate(rs, pol, groups, k_max, cost)
    return float(tk.sum() / sec.sum())


def tune_baselines(rs: ReplaySet, calib: list[int], cfg: ExperimentConfig, b: int, k_max: int, cost: SpecCost,
                   topk: int, cal: GateCalibration) -> dict[str, dict]:
    """Tune every parametrised baseline at batch ``b`` on the calibration samples with the bracketing
    tuner (:func:`icml26.core.stats.bracket`: 3-point log2 grid, ``cfg.tune_extend`` points per
    extension, at most ``cfg.tune_cap`` extensions, objective = modelled tokens/s): static tree size
    ``n`` (:func:`static_shape`), DenseDynamic's per-request budget, AdaptiveChain's depth limit.
    Returns ``{arm: {"policy", "param", "grid", "scores", "interior", "evaluations"}}``."""
    groups = _groups(calib, b, cfg.seed + 7)
    share = max(2.0, min(k_max // b - 1, cfg.total / 2))  # the even share, the grid's centre
    arms = {
        "StaticTree (tuned)": (lambda n: static_shape(n, cfg.depth), (4, 8, 16), (2, 64)),
        "DenseDynamic (tuned)": (lambda n: DenseDynamic(tau=cal.single_tau, depth=cfg.depth, topk=topk,
                                                        total=cfg.total, per_request=n, name="DenseDynamic (tuned)"),
                                 (share / 2, share, 2 * share), (1, cfg.total)),
        "AdaptiveChain (tuned)": (lambda n: AdaptiveChain(depth=n, name="AdaptiveChain (tuned)"),
                                  (cfg.depth / 4, cfg.depth / 2, cfg.depth), (1, cfg.depth)),
    }
    out = {}
    for arm, (make, grid, bounds) in arms.items():
        seen: dict[int, float] = {}

        def objective(x, make=make, seen=seen):
            n = int(round(x))
            if n not in seen:
                seen[n] = _tps(rs, make(n), groups, k_max, cost)
            return seen[n]

        res = bracket(objective, grid, minimize=False, extend_by=cfg.tune_extend, cap=cfg.tune_cap, bounds=bounds)
        best = int(round(res.best))
        out[arm] = {"policy": make(best), "param": best, "grid": [int(round(g)) for g in res.grid],
                    "scores": [float(v) for v in res.scores], "interior": bool(res.interior),
                    "evaluations": len(seen)}
    return out


def _setting(rs, calib, conf, acc, cfg, b, cost) -> dict:
    """Everything decided before evaluation at batch ``b`` under ``cost``: K_max, beam width,
    the gate calibration within the reachable depths, the tuned baselines and every policy."""
    knee = cost.knee(b)
    k_max = max(b, int(knee.k_max))
    topk = shared_topk(cfg.topk, k_max, b)
    reach = reach_depth(k_max, b, cfg.depth)
    cal = calibrate_gates(conf, acc, cfg.auc_min, cfg.max_gates, max_depth=reach)
    tuned = tune_baselines(rs, calib, cfg, b, k_max, cost, topk, cal)
    pols = [AR(), StaticTree(depth=cfg.depth, topk=cfg.topk, total=cfg.total),
            StaticTree(depth=5, topk=4, total=8, name="StaticTree-SGLang")]
    pols += [t["policy"] for t in tuned.values()] + echo_variants(cfg, cal, topk)
    return {"knee": knee, "k_max": k_max, "topk": topk, "reach": reach, "cal": cal, "tuned": tuned, "pols": pols}


def headline_ratio(rs, pols, groups, k_max, cost) -> tuple[float, str]:
    """Echo's modelled tokens/s over the best baseline's on ``groups``, and that baseline."""
    tps = {p.name: _tps(rs, p, groups, k_max, cost) for p in pols if p.name in BASELINES or p.name == "Echo"}
    best = max(BASELINES, key=lambda n: tps[n])
    return tps["Echo"] / tps[best], best


def measure_traces(model, tok, cfg: ExperimentConfig, draft=None, cache_dir: Path | None = None,
                   progress=None) -> dict:
    """The measured part: prompts, the target's greedy continuations, the replay positions, the
    draft's beams (a :class:`ReplaySet` with its memoized oracle) and the gate statistics.

    ``cache_dir``: continuations go to a resumable ``Memo`` there and the draft oracle's memo to an
    ``.npz`` (both keyed by the models, dtype and sizes), so a rerun skips them."""
    from icml26.core.checkpoint import Memo, source_fingerprint

    lm = TreeLM(model)
    dlm = lm if draft is None else TreeLM(draft)
    if dlm.vocab != lm.vocab:
        raise ValueError(f"draft vocabulary ({dlm.vocab}) differs from the target's ({lm.vocab})")
    agreement = None
    exit_layer = cfg.exit_layer
    if draft is not None:
        exit_layer = None
    elif exit_layer is None:
        from icml26.core.text import token_ids

        ids = token_ids(tok, "validation", max_tokens=256)
        layers = range(max(1, lm.n_layers - 8), lm.n_layers)
        agreement = exit_layer_agreement(lm, ids, layers)
        exit_layer = choose_exit_layer(agreement, cfg.agreement_target)
    texts = echo_prompts(cfg.n_prompts + cfg.n_calib, seed=cfg.seed)
    prompts = [chat_ids(tok, t) for _, t in texts]
    memo, memo_file = None, None
    if cache_dir is not None:
        key = {"target": str(getattr(model, "name_or_path", "")), "draft": str(getattr(draft, "name_or_path", "")),
               "dtype": str(lm.dtype), "exit_layer": exit_layer, "n": cfg.n_prompts + cfg.n_calib,
               "tokens": cfg.max_new_tokens, "seed": cfg.seed, "gen_batch": cfg.gen_batch,
               "code": source_fingerprint("icml26.echo.model", "icml26.echo.decode", "icml26.echo.verify")}
        cache_dir = Path(cache_dir)
        cache_dir.mkdir(parents=True, exist_ok=True)
        memo = Memo(cache_dir / "continuations.json", config=key)
        memo_file = cache_dir / f"draft_memo_s{cfg.stride}_d{cfg.depth}.npz"
    conts = greedy_continuations(lm, prompts, cfg.max_new_tokens, cfg.gen_batch, tok.eos_token_id, progress, memo)
    seqs = [p + c for p, c in zip(prompts, conts, strict=True)]
    positions = [replay_positions(len(p), len(s), cfg.depth, cfg.stride) for p, s in zip(prompts, seqs, strict=True)]
    rs = ReplaySet(dlm, exit_layer, seqs, positions, progress, memo_file=memo_file)
    rs.warm(cfg.topk, cfg.depth, progress)
    if memo_file is not None:
        rs.save_memo(memo_file)
    by_prompt: dict[int, list[int]] = {}
    for s, (i, _) in enumerate(rs.samples):
        by_prompt.setdefault(i, []).append(s)
    eval_prompts = [i for i in range(cfg.n_prompts) if i in by_prompt]
    calib = [s for i in range(cfg.n_prompts, len(prompts)) for s in by_prompt.get(i, [])]
    if not calib or not eval_prompts:
        raise RuntimeError("no replay positions: prompts ended (EOS) before depth + 1 tokens")
    conf, acc = gate_statistics(rs, calib, cfg.topk, cfg.depth)
    return {"rs": rs, "exit_layer": exit_layer, "agreement": agreement, "by_prompt": by_prompt,
            "eval_prompts": eval_prompts, "calib": calib, "conf": conf, "acc": acc, "conts": conts,
            "memo_file": memo_file, "loaded_nodes": rs.loaded}


def run_experiment(model, tok, cfg: ExperimentConfig, cost: SpecCost | Callable[..., SpecCost] | None = None,
                   progress=None, draft=None, cache_dir: Path | None = None) -> dict:
    """Run everything; returns a JSON-able dict (rows, calibration, tuning, band, bootstrap, ...).

    ``cost``: a :class:`SpecCost`, or a factory ``cost(context=..., mfu_scale=..., mbu=...)``
    (needed for the sensitivity band; default :func:`~icml26.echo.cost.replica_spec_cost`).
    ``draft``: a separate same-vocabulary causal LM (default: the self-draft of ``cfg.exit_layer``
    layers, swept when ``None``)."""
    factory = cost if callable(cost) and not isinstance(cost, SpecCost) else None
    if cost is None:
        factory = replica_spec_cost
    nominal = factory(context=cfg.context) if factory is not None else cost
    tr = measure_traces(model, tok, cfg, draft, cache_dir, progress)
    rs, by_prompt, eval_prompts, calib = tr["rs"], tr["by_prompt"], tr["eval_prompts"], tr["calib"]
    conf, acc = tr["conf"], tr["acc"]
    cal_full = calibrate_gates(conf, acc, cfg.auc_min, cfg.max_gates)
    eval_samples = [s for i in eval_prompts for s in by_prompt[i]]
    # every beam width the policies will use (shared widths per B and band setting, the static
    # family's 4 and 10, the chain's 1): warmed in batched forwards per sequence instead of one
    # draft forward per request and depth inside the policies
    costs = [nominal] + ([factory(**({"context": cfg.context} | kw)) for kw in SENSITIVITY.values()]
                         if factory is not None and cfg.sensitivity else [])
    widths = {1, 4, cfg.topk} | {shared_topk(cfg.topk, max(b, int(c.knee(b).k_max)), b)
                                 for b in cfg.batch_sizes for c in costs[:1]} \
        | {shared_topk(cfg.topk, max(cfg.headline_b, int(c.knee(cfg.headline_b).k_max)), cfg.headline_b)
           for c in costs}
    for w in sorted(widths):
        rs.warm(min(w, cfg.topk), cfg.depth, progress)
    if tr["memo_file"] is not None:
        rs.save_memo(tr["memo_file"])
    rows, knees, trees, tuning, settings, gates_act = [], {}, {}, {}, {}, {}
    it = cfg.batch_sizes
    if progress is not None:
        it = progress.track(it, total=len(it), description="echo: tune and replay")
    for b in it:
        st = _setting(rs, calib, conf, acc, cfg, b, nominal)
        settings[b] = st
        k_max = st["k_max"]
        knees[b] = asdict(st["knee"]) | {"k_max_used": k_max, "reach": st["reach"],
                                         "gate_depths": list(st["cal"].gate_depths), "taus": list(st["cal"].taus)}
        tuning[b] = {a: {k: v for k, v in t.items() if k != "policy"} for a, t in st["tuned"].items()}
        groups = _groups(eval_samples, b, cfg.seed)
        ar_tps = None
        recs = {}
        for pol in st["pols"]:
            keep = [] if pol.name in BASELINES or pol.name.startswith("Echo") else None
            tk, sec, ver, n = _simulate(rs, pol, groups, k_max, nominal, keep)
            if keep is not None:
                recs[pol.name] = keep
            tps = tk.sum() / sec.sum()
            ar_tps = tps if isinstance(pol, AR) else ar_tps
            rows.append({"policy": pol.name, "B": b, "K_max": k_max, "beam top-k": getattr(pol, "topk", 1),
                         "param": _param(pol), "MAT": tk.sum() / n.sum(), "mean K_i": ver.sum() / n.sum(),
                         "verified/accepted": ver.sum() / tk.sum(), "tokens/s (modelled)": tps,
                         "speed-up vs AR": tps / ar_tps})
        gates_act[b] = tree_differences(recs["Echo"], recs["Echo (no gates)"])
        if b == cfg.headline_b:
            trees = {k: v for k, v in recs.items() if k in BASELINES or k == "Echo"}
        orc = oracle_chain(cfg.depth, b, k_max, nominal)
        rows.append({"policy": ORACLE, "B": b, "K_max": k_max, "beam top-k": 1, "param": "", **orc,
                     "speed-up vs AR": orc["tokens/s (modelled)"] / ar_tps})
    hb = cfg.headline_b
    st = settings[hb]
    rows += budget_diagnostic(rs, st, eval_samples, cfg, nominal, rows)
    boot = _bootstrap(rs, st["pols"], by_prompt, eval_prompts, cfg, nominal, st["k_max"], progress)
    band = {}
    if factory is not None and cfg.sensitivity:
        groups = _groups(eval_samples, hb, cfg.seed)
        its = list(SENSITIVITY.items())
        if progress is not None:
            its = progress.track(its, total=len(its), description="echo: sensitivity band")
        for name, kw in its:
            c = factory(**({"context": cfg.context} | kw))
            sx = settings[hb] if name == "nominal" else _setting(rs, calib, conf, acc, cfg, hb, c)
            r, best = headline_ratio(rs, sx["pols"], groups, sx["k_max"], c)
            band[name] = {"ratio": r, "best baseline": best, "K_max": sx["k_max"], "reach": sx["reach"],
                          "gate_depths": list(sx["cal"].gate_depths),
                          "tuned": {a: t["param"] for a, t in sx["tuned"].items()}}
    if memo_file := tr["memo_file"]:
        rs.save_memo(memo_file)  # nodes the policies' own beams added
    return {"config": asdict(cfg), "exit_layer": tr["exit_layer"], "agreement": tr["agreement"],
            "n_samples": len(eval_samples), "n_calib_samples": len(calib), "calibration": cal_full.to_dict(),
            "knees": knees, "tuning": tuning, "gates_act": gates_act, "rows": rows, "bootstrap": boot,
            "band": band, "headline_trees": trees, "continuation_lengths": [len(c) for c in tr["conts"]],
            "draft_nodes_run": rs.oracle.nodes_run, "draft_nodes_loaded": tr["loaded_nodes"],
            "headline_calibration": settings[hb]["cal"].to_dict(), "headline_k_max": settings[hb]["k_max"],
            "headline_topk": settings[hb]["topk"],
            "gate_stats": {"conf": np.asarray(conf).tolist(), "acc": np.asarray(acc).tolist()}}


def budget_diagnostic(rs, st: dict, eval_samples: list[int], cfg: ExperimentConfig, cost: SpecCost, rows: list,
                      mults=(2, 4)) -> list[dict]:
    """Diagnostic rows (not in the headline): Echo at the headline B with its batch budget set to
    ``m x K_max`` instead of the knee (same gates and beam width), to show whether the knee budget
    is what limits it."""
    b = cfg.headline_b
    echo = next(p for p in st["pols"] if p.name == "Echo")
    ar_tps = next(r["tokens/s (modelled)"] for r in rows if r["B"] == b and r["policy"] == "AR")
    groups = _groups(eval_samples, b, cfg.seed)
    out = []
    for m in mults:
        pol = replace(echo, name=f"Echo (budget {m} x K_max, diagnostic)")
        k = int(m * st["k_max"])
        tk, sec, ver, n = _simulate(rs, pol, groups, k, cost)
        tps = tk.sum() / sec.sum()
        out.append({"policy": pol.name, "B": b, "K_max": k, "beam top-k": pol.topk, "param": _param(pol),
                    "MAT": tk.sum() / n.sum(), "mean K_i": ver.sum() / n.sum(), "verified/accepted": ver.sum() / tk.sum(),
                    "tokens/s (modelled)": tps, "speed-up vs AR": tps / ar_tps})
    return out


def _param(pol: Policy) -> str:
    if isinstance(pol, StaticTree):
        return f"{pol.depth}/{pol.topk}/{pol.total}"
    if isinstance(pol, DenseDynamic):
        return f"per-request {pol.per_request}" if pol.per_request is not None else "even share"
    if isinstance(pol, AdaptiveChain):
        return f"depth {pol.depth}"
    if isinstance(pol, Echo):
        return f"gates {list(pol.gate_depths)}" if pol.gate_depths and len(pol.gate_depths) < pol.depth else (
            "every depth" if pol.gate_depths else "none")
    return ""


def _bootstrap(rs, pols, by_prompt, eval_prompts, cfg, cost, k_max, progress) -> list[float]:
    """Headline ratio (Echo / best baseline tokens/s at ``headline_b``) over prompt resamples, the
    policies (tuned parameters, gates) fixed as chosen on the calibration prompts."""
    b = cfg.headline_b
    rng = np.random.default_rng(cfg.seed + 1)
    out = []
    it = range(cfg.n_boot)
    if progress is not None:
        it = progress.track(it, total=cfg.n_boot, description="echo: bootstrap")
    for r in it:
        picks = rng.choice(eval_prompts, size=len(eval_prompts), replace=True)
        pool = [s for i in picks for s in by_prompt[int(i)]]
        out.append(headline_ratio(rs, pols, _groups(pool, b, cfg.seed + 100 + r), k_max, cost)[0])
    return out


def live_policies(cfg: ExperimentConfig, cal: GateCalibration, topk: int, reach: int) -> list[Policy]:
    """The live-decoding rows' policies: AR, SGLang's static tree, an adaptive chain as deep as the
    even budget share reaches, and Echo with gates calibrated within that reach."""
    lim = {"depth": cfg.depth, "topk": topk, "total": cfg.total}
    return [AR(), StaticTree(depth=5, topk=4, total=8, name="StaticTree-SGLang"),
            AdaptiveChain(depth=reach), Echo(gate_depths=cal.gate_depths, taus=cal.taus, **lim)]


def live_decoding(model, tok, cfg: ExperimentConfig, draft, cal, k_max_of: Callable[[int], int],
                  progress=None) -> list[dict]:
    """Real speculative decoding on this device: wall-clock tokens/s of every live policy vs AR.

    ``draft``: an exit layer ``l`` (self-draft) or a same-vocabulary model. ``cal``: the gate
    calibration (:class:`~icml26.echo.calibrate.GateCalibration`), or ``cal(reach)`` giving one
    calibrated within the reachable depths. ``k_max_of(B)``: the budget at
    batch size B. The first ``cfg.live_prompts`` evaluation prompts decode ``cfg.live_tokens``
    greedy tokens at each B in ``cfg.live_batch_sizes`` (slots refilled); every policy's output is
    compared token for token with AR's at the same B. Verification rows are padded only to the
    batch's widest tree (``bucket=1``: no CUDA graphs on a CPU)."""
    lm = model if isinstance(model, TreeLM) else TreeLM(model)
    texts = echo_prompts(cfg.n_prompts + cfg.n_calib, seed=cfg.seed)[: min(cfg.live_prompts, cfg.n_prompts)]
    prompts = [chat_ids(tok, t) for _, t in texts]
    jobs = []
    for b in cfg.live_batch_sizes:
        k_max = max(b, int(k_max_of(b)))
        reach = reach_depth(k_max, b, cfg.depth)
        cb = cal(reach) if callable(cal) else cal
        jobs += [(b, k_max, pol) for pol in live_policies(cfg, cb, shared_topk(cfg.topk, k_max, b), reach)]
    it = jobs
    if progress is not None:
        it = progress.track(jobs, total=len(jobs), description="echo: live decoding")
    rows, ref, ar_tps = [], {}, {}
    for b, k_max, pol in it:
        dec = SpeculativeDecoder(lm, draft, pol, k_max, bucket=1)
        t0 = time.perf_counter()
        out = dec.generate(prompts, cfg.live_tokens, batch_size=b, eos_token_id=tok.eos_token_id)
        wall = time.perf_counter() - t0
        n = sum(map(len, out.tokens))
        tps = n / wall
        if isinstance(pol, AR):
            ref[b], ar_tps[b] = out.tokens, tps
        draft_s = sum(s.draft_s for s in out.steps)
        verify_s = sum(s.verify_s for s in out.steps)
        rows.append({"policy": f"{pol.name} (live CPU)" if lm.device.type == "cpu" else f"{pol.name} (live)",
                     "B": b, "K_max": k_max, "beam top-k": getattr(pol, "topk", 1), "MAT": out.mean_accepted,
                     "verified/accepted": out.verified_per_accepted, "tokens/s (wall)": tps,
                     "wall vs AR": tps / ar_tps[b], "draft share": draft_s / max(draft_s + verify_s, 1e-12),
                     "identical to AR": f"{sum(x == y for x, y in zip(out.tokens, ref[b], strict=True))}/{len(prompts)}",
                     "tokens": n, "wall s": wall})
    return rows
