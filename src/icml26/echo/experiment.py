"""The ECHO experiment: greedy continuations, exact replay of every policy, modelled throughput.

Measured (real model, CPU): the target's greedy continuations, the self-draft's trees and the
acceptance of every policy (tokens emitted per verification, tree sizes, verified per accepted).
Modelled: seconds per iteration from :class:`~icml26.echo.cost.SpecCost` (default: an 8B Llama-3
target on one H100 with an EAGLE-3-like one-layer draft), giving tokens/s at every batch size.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from icml26.echo.calibrate import calibrate_gates, gate_statistics
from icml26.echo.cost import SpecCost, gpu_spec_cost
from icml26.echo.decode import SpeculativeDecoder
from icml26.echo.draft import choose_exit_layer, exit_layer_agreement
from icml26.echo.model import TreeLM
from icml26.echo.policies import AR, AdaptiveChain, DenseDynamic, Echo, Policy, StaticTree
from icml26.echo.prompts import echo_prompts
from icml26.echo.replay import ReplaySet, make_groups, replay_positions

__all__ = ["ExperimentConfig", "chat_ids", "greedy_continuations", "run_experiment", "live_decoding", "BASELINES",
           "ORACLE", "oracle_chain", "tree_differences"]

BASELINES = ("StaticTree", "StaticTree-SGLang", "DenseDynamic", "AdaptiveChain")


@dataclass(frozen=True)
class ExperimentConfig:
    """Sizes of one ECHO replay experiment (see docs/echo.md for the defaults' sources)."""

    n_prompts: int = 24
    n_calib: int = 8
    max_new_tokens: int = 64
    stride: int = 4
    depth: int = 8
    topk: int = 10
    total: int = 60
    batch_sizes: tuple[int, ...] = (1, 8, 32, 128, 256)
    headline_b: int = 128
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
    seed: int = 0

    def __post_init__(self):
        for f in ("n_prompts", "n_calib", "max_new_tokens", "stride", "depth", "topk", "total", "gen_batch",
                  "live_prompts", "live_tokens"):
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
                         eos: int | None, progress=None) -> list[list[int]]:
    """The target's greedy continuations, decoded in batches (AR trees, no padding bucket)."""
    dec = SpeculativeDecoder(lm, 1, AR(), k_max=batch, bucket=1)
    chunks = [prompts[i:i + batch] for i in range(0, len(prompts), batch)]
    if progress is not None:
        chunks = progress.track(chunks, total=len(chunks), description="echo: greedy continuations")
    out = []
    for c in chunks:
        out += dec.generate(c, max_new_tokens, batch_size=len(c), eos_token_id=eos).tokens
    return out


def shared_topk(cfg_topk: int, k_max: int, b: int) -> int:
    """Beam width of the budgeted policies at batch ``b``: the per-request budget share
    ``ceil(k_max / b)``, clipped to [1, ``cfg_topk``] (the same rule for every budgeted policy)."""
    return int(min(cfg_topk, max(1, math.ceil(k_max / b))))


def _policies(cfg: ExperimentConfig, cal, topk: int | None = None) -> list[Policy]:
    lim = {"depth": cfg.depth, "topk": topk or cfg.topk}
    return [
        AR(),
        StaticTree(depth=cfg.depth, topk=cfg.topk, total=cfg.total),
        StaticTree(depth=5, topk=4, total=8, name="StaticTree-SGLang"),
        DenseDynamic(tau=cal.single_tau, total=cfg.total, **lim),
        AdaptiveChain(depth=cfg.depth),
        Echo(gate_depths=cal.gate_depths, taus=cal.taus, total=cfg.total, **lim),
        Echo(gate_depths=cal.gate_depths, taus=(cal.single_tau,) * len(cal.gate_depths), total=cfg.total,
             name="Echo (single tau)", **lim),
        Echo(gate_depths=tuple(range(1, cfg.depth + 1)), taus=cal.dense_taus, total=cfg.total,
             name="Echo (dense gates)", **lim),
    ]


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


def run_experiment(model, tok, cfg: ExperimentConfig, cost: SpecCost | None = None, progress=None,
                   draft=None) -> dict:
    """Run everything; returns a JSON-able dict (rows, calibration, headline bootstrap, ...).

    ``draft``: a separate same-vocabulary causal LM (default: the self-draft of ``cfg.exit_layer``
    layers, swept when ``None``)."""
    cost = cost or gpu_spec_cost(cfg.context)
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
    conts = greedy_continuations(lm, prompts, cfg.max_new_tokens, cfg.gen_batch, tok.eos_token_id, progress)
    seqs = [p + c for p, c in zip(prompts, conts, strict=True)]
    positions = [replay_positions(len(p), len(s), cfg.depth, cfg.stride) for p, s in zip(prompts, seqs, strict=True)]
    rs = ReplaySet(dlm, exit_layer, seqs, positions, progress)
    rs.warm(cfg.topk, cfg.depth, progress)
    by_prompt: dict[int, list[int]] = {}
    for s, (i, _) in enumerate(rs.samples):
        by_prompt.setdefault(i, []).append(s)
    eval_prompts = [i for i in range(cfg.n_prompts) if i in by_prompt]
    calib = [s for i in range(cfg.n_prompts, len(prompts)) for s in by_prompt.get(i, [])]
    if not calib or not eval_prompts:
        raise RuntimeError("no replay positions: prompts ended (EOS) before depth + 1 tokens")
    conf, acc = gate_statistics(rs, calib, cfg.topk, cfg.depth)
    cal = calibrate_gates(conf, acc, cfg.auc_min, cfg.max_gates)
    eval_samples = [s for i in eval_prompts for s in by_prompt[i]]
    rows, knees, trees = [], {}, {}
    it = cfg.batch_sizes
    if progress is not None:
        it = progress.track(it, total=len(it), description="echo: replay policies")
    for b in it:
        knee = cost.knee(b)
        k_max = max(b, int(knee.k_max))
        knees[b] = asdict(knee) | {"k_max_used": k_max}
        groups = make_groups(len(eval_samples), b, max(3, math.ceil(2 * len(eval_samples) / b)), cfg.seed)
        groups = [[eval_samples[j] for j in g] for g in groups]
        topk = shared_topk(cfg.topk, k_max, b)
        pols = _policies(cfg, cal, topk)
        ar_tps = None
        for pol in pols:
            keep = trees.setdefault(pol.name, []) if b == cfg.headline_b and not isinstance(pol, AR) else None
            tk, sec, ver, n = _simulate(rs, pol, groups, k_max, cost, keep)
            tps = tk.sum() / sec.sum()
            ar_tps = tps if isinstance(pol, AR) else ar_tps
            rows.append({"policy": pol.name, "B": b, "K_max": k_max, "beam top-k": getattr(pol, "topk", 1), "MAT": tk.sum() / n.sum(),
                         "mean K_i": ver.sum() / n.sum(), "verified/accepted": ver.sum() / tk.sum(),
                         "tokens/s (modelled)": tps, "speed-up vs AR": tps / ar_tps})
        orc = oracle_chain(cfg.depth, b, k_max, cost)
        rows.append({"policy": ORACLE, "B": b, "K_max": k_max, "beam top-k": 1, **orc,
                     "speed-up vs AR": orc["tokens/s (modelled)"] / ar_tps})
    pols = _policies(cfg, cal, shared_topk(cfg.topk, max(cfg.headline_b, int(cost.knee(cfg.headline_b).k_max)),
                                           cfg.headline_b))
    boot = _bootstrap(rs, pols, by_prompt, eval_prompts, cfg, cost, progress)
    return {"config": asdict(cfg), "exit_layer": exit_layer, "agreement": agreement,
            "n_samples": len(eval_samples), "n_calib_samples": len(calib), "calibration": cal.to_dict(),
            "knees": knees, "rows": rows, "bootstrap": boot, "headline_trees": trees,
            "continuation_lengths": [len(c) for c in conts], "draft_nodes_run": rs.oracle.nodes_run}


def _bootstrap(rs, pols, by_prompt, eval_prompts, cfg, cost, progress) -> list[float]:
    """Headline ratio (Echo / best baseline tokens/s at ``headline_b``) over prompt resamples."""
    b = cfg.headline_b
    k_max = max(b, int(cost.knee(b).k_max))
    rng = np.random.default_rng(cfg.seed + 1)
    wanted = {p.name: p for p in pols if p.name in BASELINES or p.name == "Echo"}
    out = []
    it = range(cfg.n_boot)
    if progress is not None:
        it = progress.track(it, total=cfg.n_boot, description="echo: bootstrap")
    for r in it:
        picks = rng.choice(eval_prompts, size=len(eval_prompts), replace=True)
        pool = [s for i in picks for s in by_prompt[int(i)]]
        groups = make_groups(len(pool), b, max(3, math.ceil(2 * len(pool) / b)), cfg.seed + 100 + r)
        groups = [[pool[j] for j in g] for g in groups]
        tps = {}
        for name, pol in wanted.items():
            tk, sec, _, _ = _simulate(rs, pol, groups, k_max, cost)
            tps[name] = tk.sum() / sec.sum()
        out.append(tps["Echo"] / max(tps[n] for n in BASELINES))
    return out


def live_policies(cfg: ExperimentConfig, cal, topk: int) -> list[Policy]:
    """The live-decoding rows' policies: AR, EAGLE-3's static tree, DenseDynamic and Echo, with the
    replay's calibrated gates and the shared beam-width rule."""
    lim = {"depth": cfg.depth, "topk": topk, "total": cfg.total}
    return [AR(), StaticTree(depth=cfg.depth, topk=cfg.topk, total=cfg.total),
            DenseDynamic(tau=cal.single_tau, **lim), Echo(gate_depths=cal.gate_depths, taus=cal.taus, **lim)]


def live_decoding(model, tok, cfg: ExperimentConfig, draft, cal, k_max_of: Callable[[int], int],
                  progress=None) -> list[dict]:
    """Real speculative decoding on this device: wall-clock tokens/s of every live policy vs AR.

    ``draft``: an exit layer ``l`` (self-draft) or a same-vocabulary model. ``cal``: the gate
    calibration (:class:`~icml26.echo.calibrate.GateCalibration`). ``k_max_of(B)``: the budget at
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
        jobs += [(b, k_max, pol) for pol in live_policies(cfg, cal, shared_topk(cfg.topk, k_max, b))]
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
