"""The ``uds`` claim: at equal data budget, UDS selection beats Random, MaxLoss and GradNorm on
held-out loss, and costs less wall-clock than full-data SFT.

Settings. ``small`` (the issue's): SmolLM2-135M-Instruct with LoRA r=8, alpha=16 on the 7
projections, one epoch over 256 examples of <= 96 tokens built offline from a seed (Wikipedia
"What is TITLE?" -> first two sentences, basic arithmetic, GSM-symbolic-style word problems,
HumanEval prompt -> solution with 40 problems held out), budgets 25% and 12.5%, one LR tuned on
the full-data arm's validation loss with the bracketing tuner (start grid 3e-4, 1e-3, 3e-3,
extended one point at a time at the edge holding the best, at most twice), 96 held-out
examples, 3 seeds. ``tiny`` (and
``model=scratch``): a from-scratch byte-level ``tiny_llama`` on programmatic pairs with redundant
repeats and label noise. Every arm sees the same pool order, epochs and optimizer steps, and
differs only in which ``budget`` fraction of each step's ``candidates`` it trains on. Finished
runs are cached under ``cache_root()/uds/runs`` so an interrupted reproduction resumes.

Options (``--opt key=value``): ``model`` (``smollm2`` (small's default), a path to another LM,
or ``scratch`` for the from-scratch tiny Llama; tiny defaults to scratch), ``lrs`` (the LR grid,
comma-separated), ``pool`` (LM pool size, default 256), ``budgets`` (comma-separated, must include 0.25), ``dup``/``noise`` (share of repeated templates / random responses in the LM
pool; default 0), ``alpha`` (UDS weight, default 2.5e-3), ``seeds`` (count), ``threads`` (torch
threads for the runs; default 1, which is faster on a busy 2-core box), ``no_cache=1``,
``control_family`` (the family the single-source control prefers; default the pool's first).

Budgets and power checks. UDS prefers long responses, so at an equal *example* budget it trains
on more tokens than Random; the record's ``budgets`` has the trained (loss-bearing response)
tokens and all tokens (prompt + response) per arm at the headline budget, and a token-matched
Random row (``random-tokens``: random candidates of the same windows until it has trained on as
many response tokens as UDS, spread evenly over the steps) is run. Control: a single-source
selection (``single-source``: each window's candidates of one family first, random within, the
rest only to fill the K) against Random at the same budget: selection must move held-out loss.
Floor: the model before fine-tuning. Degeneracy: the share of UDS's picks that Random also picks
(same windows, same epoch). The headline's interval is the clustered bootstrap over seeds, then
held-out examples (paired per seed), of the ratio of summed held-out NLL (= the per-token ratio).
"""

from __future__ import annotations

import hashlib
import json
import statistics
from dataclasses import asdict, dataclass, replace

import torch

from icml26.core.checkpoint import source_fingerprint
from icml26.core.claims import Measure, Result, RunContext
from icml26.core.errors import UserError
from icml26.core.io import atomic_write_json
from icml26.core.lm import cache_root, tiny_llama
from icml26.uds.data import LM_FAMILIES, PoolConfig, answer_spans, make_pool, make_val
from icml26.uds.loop import TrainConfig, encode, evaluate, train_online
from icml26.uds.selectors import UDSSelector, make_selector

BASELINES = ("random", "maxloss", "gradnorm")
LR_EXTEND, LR_CAP = 1, 2  # the LR grid's bracketing: one point per extension, at most two
CONTROL_ARMS = ("random-tokens", "single-source")  # token-matched Random; the positive control
BASE_SYSTEM = "no fine-tuning (model before SFT)"
RESPONSE_TOKENS = "response tokens trained (the tokens the loss trains on)"
CACHE_VERSION = 4
# The code that produced a cached run is part of its key: edits to the method (or to the core
# pieces it trains with) never reuse stale runs.
_CODE = source_fingerprint("icml26.uds", "icml26.core.lm", "icml26.core.text")


@dataclass(frozen=True)
class Scale:
    hidden: int
    layers: int
    heads: int
    pool: PoolConfig
    max_len: int
    candidates: int
    epochs: int
    budgets: tuple[float, ...]
    ablation_budget: float
    seeds: int
    lrs: tuple[float, ...]  # tuned on the full-data arm (validation split), then shared
    lm: str | None = None  # None: from-scratch tiny_llama; else load_lm(lm) + LoRA r=8, alpha=16


def _float_list(ctx: RunContext, key: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in str(ctx.options[key]).split(","))
    except ValueError:
        raise UserError(
            f"option {key}: expected comma-separated floats; got {ctx.options[key]!r}"
        ) from None


def scale_for(ctx: RunContext) -> Scale:
    tiny = Scale(
        hidden=64, layers=2, heads=4,
        pool=PoolConfig(n_train=192, n_test=60, families=("add", "sub", "mul")),
        max_len=32, candidates=8, epochs=2, budgets=(0.25,), ablation_budget=0.25, seeds=2,
        lrs=(3e-3,),
    )  # fmt: skip
    small = Scale(
        hidden=128, layers=4, heads=4, pool=PoolConfig(n_train=2048, n_test=300, n_val=200),
        max_len=32, candidates=32, epochs=3, budgets=(0.25, 0.125), ablation_budget=0.25,
        seeds=2, lrs=(1e-3, 3e-3, 1e-2),
    )  # fmt: skip
    full = Scale(
        hidden=256, layers=6, heads=8, pool=PoolConfig(n_train=16384, n_test=400, n_val=200),
        max_len=48, candidates=64, epochs=3, budgets=(0.25, 0.125), ablation_budget=0.25,
        seeds=3, lrs=(3e-4, 1e-3, 3e-3),
    )  # fmt: skip
    model = ctx.options.get("model") or ctx.pick(tiny=None, small="smollm2", full=None)
    if model == "scratch":
        model = None
    if (
        model
    ):  # a pretrained LM with LoRA (the issue's `small`: SmolLM2-135M, 256 examples <= 96 tokens)
        mix = {
            "dup_frac": float(ctx.options.get("dup", 0.0)),
            "noise_frac": float(ctx.options.get("noise", 0.0)),
            "families": LM_FAMILIES,
        }
        n_train = int(ctx.options.get("pool", 256))  # the issue: shrink the pool, not the arms
        lm_pool = PoolConfig(n_train=n_train, n_test=96, n_val=48, **mix)
        # 8 candidates per optimizer step: 25% keeps 2 of 8, 12.5% keeps 1 of 8
        # 3 seeds and the bracketed LR grid (issue 36)
        lm_small = Scale(
            0, 0, 0, lm_pool, 96, 8, 1, (0.25, 0.125), 0.25, 3, (3e-4, 1e-3, 3e-3), lm=model
        )  # fmt: skip
        lm_tiny = Scale(
            0, 0, 0, PoolConfig(n_train=32, n_test=16, n_val=0, **mix), 96, 8, 1, (0.25,), 0.25,
            2, (1e-3,), lm=model,
        )  # fmt: skip
        sc = ctx.pick(tiny=lm_tiny, small=lm_small, full=lm_small)
    else:
        sc = ctx.pick(tiny=tiny, small=small, full=full)
    if "lrs" in ctx.options:
        sc = replace(sc, lrs=_float_list(ctx, "lrs"))
    if "budgets" in ctx.options:  # e.g. budgets=0.25 to run the headline budget only
        budgets = _float_list(ctx, "budgets")
        for b in budgets:
            if not 0 < b <= 1:
                raise UserError(f"option budgets: each budget must be in (0, 1]; got {b:g}")
        if sc.ablation_budget not in budgets:
            raise UserError(
                f"option budgets must include the headline budget {sc.ablation_budget:g}"
            )
        sc = replace(sc, budgets=budgets)
    return sc


class TokenMatchedRandom:
    """Random selection that keeps taking random candidates of each window until the run has
    trained on ``total_tokens`` loss-bearing tokens, the target spread evenly over ``n_steps``
    steps (at least one pick per step; the total overshoots by at most one example)."""

    def __init__(self, seed: int, total_tokens: float, n_steps: int):
        self.generator = torch.Generator().manual_seed(seed)
        self.total, self.n_steps = float(total_tokens), max(1, n_steps)
        self.step, self.used = 0, 0

    def select(self, model, batch: dict, k: int) -> torch.LongTensor:
        n = batch["input_ids"].shape[0]
        tokens = (batch["labels"] != -100).sum(1).tolist()
        target = self.total * min(1.0, (self.step + 1) / self.n_steps)
        take: list[int] = []
        for i in torch.randperm(n, generator=self.generator).tolist():
            if take and self.used >= target:
                break
            take.append(i)
            self.used += int(tokens[i])
        self.step += 1
        return torch.tensor(sorted(take), dtype=torch.long)

    def observe(self, chosen) -> None:
        pass


class SingleSource:
    """The positive control: of each window keep the candidates of one family (random order
    within), filling the K with random others only when the window has fewer than K of it."""

    def __init__(self, seed: int, family_of: dict[tuple, str], family: str):
        self.generator = torch.Generator().manual_seed(seed)
        self.family_of, self.family = family_of, family

    def select(self, model, batch: dict, k: int) -> torch.LongTensor:
        from icml26.uds.selectors import top_k

        ids, att = batch["input_ids"], batch["attention_mask"].bool()
        mine = torch.tensor(
            [self.family_of.get(tuple(ids[i][att[i]].tolist())) == self.family
             for i in range(ids.shape[0])],
            dtype=torch.float64,
        )  # fmt: skip
        return top_k(mine + 0.5 * torch.rand(len(mine), generator=self.generator,
                                             dtype=torch.float64), k)  # fmt: skip

    def observe(self, chosen) -> None:
        pass


def _load(sc: Scale, seed: int, device: str):
    if sc.lm is None:
        model, tok = tiny_llama(sc.hidden, sc.layers, sc.heads, max_len=sc.max_len + 8, seed=seed)
        return model.to(device), tok
    from icml26.core.lm import load_lm

    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise UserError(
            "option model=... fine-tunes with LoRA and needs `pip install peft==0.21.2`"
        ) from None
    model, tok = load_lm(
        None if sc.lm == "smollm2" else sc.lm,
        dtype=None,  # the dtype policy: bf16 on CUDA and native-bf16 CPUs, else fp32
        device=device,
    )
    targets = [
        t
        for t in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
        if any(n.endswith(t) for n, _ in model.named_modules())
    ]
    torch.manual_seed(seed)  # LoRA A init
    model = get_peft_model(
        model,
        LoraConfig(
            r=8, lora_alpha=16, lora_dropout=0.0, target_modules=targets, task_type="CAUSAL_LM"
        ),
    )
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model, tok


def _fmt(examples, lm: str | None):
    if lm is None:
        return examples
    return [replace(e, prompt=f"Question: {e.prompt}\nAnswer: ") for e in examples]


def _run_arm(
    sc: Scale,
    arm: str,
    budget: float,
    seed: int,
    lr: float,
    alpha: float,
    device: str,
    ctx,
    use_cache: bool,
    extra: dict | None = None,
) -> dict:
    # the grid-level fields (which budgets, seeds, LRs are run) do not change one arm's run, so a
    # smaller re-run (fewer seeds, one LR) reuses the cached arms
    setting = {
        k: v
        for k, v in asdict(sc).items()
        if k not in ("budgets", "ablation_budget", "seeds", "lrs")
    }
    key = json.dumps(
        [CACHE_VERSION, _CODE, setting, arm, budget, seed, lr, alpha, extra or {}],
        sort_keys=True,
        default=str,
    )
    path = cache_root() / "uds" / "runs" / (hashlib.sha256(key.encode()).hexdigest()[:24] + ".json")
    if use_cache and path.exists():
        return json.loads(path.read_text())
    pool, test = make_pool(sc.pool, seed=1000 + seed)
    # LR tuning reads only the validation loss: a second clean, unseen set, scored after the same
    # training run as the test set
    val = make_val(sc.pool, seed=1000 + seed) if sc.pool.n_val and arm == "full" else []
    model, tok = _load(sc, seed, device)
    enc, _ = encode(tok, _fmt(pool, sc.lm), sc.max_len)
    enc_test, _ = encode(tok, _fmt(test, sc.lm), sc.max_len)
    if len(enc) != len(pool) or len(enc_test) != len(test):
        raise ValueError(
            f"{len(pool) - len(enc)} pool and {len(test) - len(enc_test)} held-out examples lost "
            f"their response to the {sc.max_len}-token cutoff"
        )
    extra = extra or {}
    if arm == "base":  # the floor: the model before fine-tuning, on the same held-out set
        ev = evaluate(
            model, enc_test, tok.pad_token_id, answer_labels=answer_labels(tok, test, enc_test)
        )
        rec = {"arm": arm, "budget": 0.0, "seed": seed, "test_loss": ev.loss,
               "exact_match": ev.exact_match, "answer_match": ev.answer_match,
               "test_nll": _summed_nll(ev, enc_test)}  # fmt: skip
        atomic_write_json(path, rec)
        return rec
    if arm == "random-tokens":
        n_steps = -(-len(enc) // sc.candidates) * sc.epochs
        selector = TokenMatchedRandom(seed, extra["tokens"], n_steps)
    elif arm == "single-source":
        family_of = {
            tuple(e.input_ids): ex.source.removeprefix("dup:")
            for e, ex in zip(enc, pool, strict=True)
        }
        selector = SingleSource(seed, family_of, extra["family"])
    elif arm == "full":
        selector = None
    elif arm.startswith("uds"):
        selector = make_selector(arm, seed=seed, max_len=sc.max_len, alpha=alpha)
    else:
        selector = make_selector(arm, seed=seed)
    cfg = TrainConfig(
        lr=lr,
        candidates=sc.candidates,
        budget=1.0 if arm == "full" else budget,
        epochs=sc.epochs,
        seed=seed,
    )
    log = train_online(model, enc, selector, cfg, tok.pad_token_id, progress=ctx.progress)
    ev = evaluate(
        model, enc_test, tok.pad_token_id, answer_labels=answer_labels(tok, test, enc_test)
    )
    val_loss = float("nan")
    if val:
        enc_val, _ = encode(tok, _fmt(val, sc.lm), sc.max_len)
        val_loss = evaluate(model, enc_val, tok.pad_token_id).loss
    picks = [pool[i] for i in log.selected]
    fams = sorted({e.source.removeprefix("dup:") for e in pool + test})
    rec = {
        "arm": arm,
        "budget": 1.0 if arm == "full" else budget,
        "seed": seed,
        "lr": lr,
        "test_loss": ev.loss,
        "val_loss": val_loss,
        "exact_match": ev.exact_match,
        "answer_match": ev.answer_match,
        "answer_match_by_family": {
            f: statistics.fmean(
                m for m, e in zip(ev.per_example_match, test, strict=True) if e.source == f
            )
            for f in fams
            if any(e.source == f for e in test)
        },
        "picks_by_family": {
            f: sum(p.source.removeprefix("dup:") == f for p in picks) / len(picks) for f in fams
        },
        "pool_by_family": {
            f: sum(p.source.removeprefix("dup:") == f for p in pool) / len(pool) for f in fams
        },
        "frac_repeat_prompt": 1 - len({p.prompt for p in picks}) / len(picks),
        "n_tokens": sum(len(enc[i].input_ids) for i in log.selected),
        "n_loss_tokens": sum(sum(x != -100 for x in enc[i].labels) for i in log.selected),
        "selected": list(log.selected),
        "test_nll": _summed_nll(ev, enc_test),
        "time_scoring_s": log.time_scoring_s,
        "time_training_s": log.time_training_s,
        "steps": log.steps,
        "n_trained": len(log.selected),
        "frac_noisy": sum(p.noisy for p in picks) / len(picks),
        "frac_dup": sum(p.source.startswith("dup:") for p in picks) / len(picks),
        "mean_len": sum(len(enc[i].input_ids) for i in log.selected) / len(picks),
        "pool_frac_noisy": sum(p.noisy for p in pool) / len(pool),
        "pool_frac_dup": sum(p.source.startswith("dup:") for p in pool) / len(pool),
    }
    if isinstance(selector, UDSSelector):
        st = selector.stats
        rec["intra_std"] = statistics.pstdev(st.intra)
        rec["alpha_inter_std"] = alpha * statistics.pstdev(st.inter[len(st.inter) // 10 :] or [0.0])
    atomic_write_json(path, rec)
    return rec


def _summed_nll(ev, enc_test) -> list[float]:
    """Per held-out example, its summed NLL over the labelled tokens (the per-token mean times the
    count): summing these over examples gives the per-token loss's numerator."""
    return [
        float(loss) * sum(x != -100 for x in e.labels)
        for loss, e in zip(ev.per_example_loss, enc_test, strict=True)
    ]


def pick_overlap(a: list[int], b: list[int], epochs: int) -> tuple[int, int]:
    """``(shared, total)``: how many of run ``a``'s picks run ``b`` also picked in the same epoch
    (each pool index is a candidate once per epoch; fixed-K runs pick ``len / epochs`` per
    epoch)."""

    def keyed(sel):
        per = max(1, len(sel) // epochs)
        return {(i // per, x) for i, x in enumerate(sel)}

    ka = keyed(a)
    return len(ka & keyed(b)), len(ka)


def answer_labels(tok, examples, enc) -> list[list[int]]:
    """Per example, a label list marking only the tokens of its verifiable answer
    (:func:`icml26.uds.data.answer_spans`: the computed numbers of a GSM-style solution, the
    whole response otherwise), aligned with ``enc`` (from :func:`encode` of the same examples)."""
    out = []
    for ex, e in zip(examples, enc, strict=True):
        spans = answer_spans(ex.source.removeprefix("dup:"), ex.response)
        labels = list(e.labels)
        if spans and getattr(tok, "is_fast", False):
            offs = tok(ex.response, add_special_tokens=False, return_offsets_mapping=True)[
                "offset_mapping"
            ]
            first = len(e.labels) - sum(x != -100 for x in e.labels)  # first response position
            keep = {
                first + j
                for j, (a, b) in enumerate(offs)
                if any(a < hi and b > lo for lo, hi in spans) and first + j < len(labels)
            }
            if keep:
                labels = [x if i in keep else -100 for i, x in enumerate(labels)]
        out.append(labels)
    return out


def step_cost(sc: Scale, seed: int, lr: float, alpha: float, device: str, repeats: int = 5) -> dict:
    """CPU seconds (``time.process_time``, robust to other processes on a shared machine) of one
    optimizer step on the same window: full data (train on all b) vs UDS (score b, train on K).
    Medians over ``repeats`` after one warm-up; on a GPU use wall-clock instead."""
    import time

    from icml26.uds.loop import _lm_loss, budget_k, collate, select_batch

    model, tok = _load(sc, seed, device)
    pool, _ = make_pool(sc.pool, seed=1000 + seed)
    enc, _ = encode(tok, _fmt(pool, sc.lm), sc.max_len)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    k = budget_k(sc.ablation_budget, sc.candidates)

    def train(batch):
        model.train()
        loss = _lm_loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    out: dict[str, list[float]] = {"full": [], "uds": [], "uds_scoring": []}
    sel = make_selector("uds", seed=seed, max_len=sc.max_len, alpha=alpha)
    for r in range(repeats + 1):
        window = enc[r * sc.candidates : (r + 1) * sc.candidates]
        batch = collate(window, tok.pad_token_id)
        t0 = time.process_time()
        train(batch)
        t1 = time.process_time()
        sub, _ = select_batch(model, batch, sel, k)
        t2 = time.process_time()
        train(sub)
        t3 = time.process_time()
        if r:  # the first round warms up
            out["full"].append(t1 - t0)
            out["uds"].append(t3 - t1)
            out["uds_scoring"].append(t2 - t1)
    return {key: statistics.median(v) for key, v in out.items()}


def run(ctx: RunContext) -> Result:
    sc = scale_for(ctx)
    alpha = float(ctx.options.get("alpha", 2.5e-3))
    seeds = [ctx.seed + i for i in range(int(ctx.options.get("seeds", sc.seeds)))]
    use_cache = ctx.options.get("no_cache", "0") != "1"
    threads = torch.get_num_threads()
    torch.set_num_threads(int(ctx.options.get("threads", 1)))
    try:
        return _run(ctx, sc, alpha, seeds, use_cache)
    finally:
        torch.set_num_threads(threads)


def tune_lr(objective, grid) -> tuple[float, object]:
    """The shared LR: ``core.stats.bracket`` over ``grid`` (validation loss, minimised), extended
    by ``LR_EXTEND`` point(s) at the edge holding the best, at most ``LR_CAP`` times (each point
    one full-data run, cached). Returns ``(best LR, TuneResult)``."""
    from icml26.core.stats import bracket

    grid = sorted(float(x) for x in grid)
    if len(grid) < 3 or len(set(grid)) != len(grid):
        raise UserError(f"--opt lrs: the bracketing tuner needs >= 3 distinct LRs (or a single "
                        f"LR, which is used as given); got {grid}")
    tr = bracket(objective, grid, minimize=True, extend_by=LR_EXTEND, cap=LR_CAP)
    return tr.best, tr


def _run(ctx: RunContext, sc: Scale, alpha: float, seeds: list[int], use_cache: bool) -> Result:
    device = ctx.device

    def arm(name, budget, seed, lr, extra=None):
        return _run_arm(sc, name, budget, seed, lr, alpha, device, ctx, use_cache, extra)

    # one LR for everyone: the full-data arm's validation loss (seed 0 of this run), bracketed
    if len(sc.lrs) > 1:
        if not sc.pool.n_val:
            raise UserError("an LR grid needs a validation set (n_val > 0)")
        lr, tr = tune_lr(lambda x: arm("full", 1.0, seeds[0], x)["val_loss"], sc.lrs)
        val = dict(zip(tr.grid, tr.scores, strict=True))
        tuning = {"full@lr": {**tr.to_dict(), "param": "lr", "history": tr.history},
                  "protocol": {"start_grid": list(sc.lrs), "extend_by": LR_EXTEND,
                               "cap": LR_CAP, "seed": seeds[0],
                               "objective": "full-data arm's validation loss"}}
    else:
        val, lr, tuning, tr = {}, sc.lrs[0], None, None
    arms = [("full", 1.0)]
    for b in sc.budgets:
        names = [*BASELINES, "uds"] + (
            ["uds-intra", "uds-inter", *(["uds-lennorm"] if sc.lm is None else [])]
            if b == sc.ablation_budget
            else []
        )
        arms += [(n, b) for n in names]
    runs = [arm(n, b, s, lr) for n, b in arms for s in seeds]
    b0 = sc.ablation_budget
    family = ctx.options.get("control_family") or sc.pool.families[0]
    if family not in sc.pool.families:
        raise UserError(
            f"option control_family must be one of {', '.join(sc.pool.families)}; got {family!r}"
        )
    uds_tokens = {
        r["seed"]: r["n_loss_tokens"] for r in runs if (r["arm"], r["budget"]) == ("uds", b0)
    }
    runs += [arm("random-tokens", b0, s, lr, {"tokens": uds_tokens[s]}) for s in seeds]
    runs += [arm("single-source", b0, s, lr, {"family": family}) for s in seeds]
    arms += [(n, b0) for n in CONTROL_ARMS]
    base = [arm("base", 0.0, s, lr) for s in seeds]

    from icml26.core.stats import budgets as budget_record
    from icml26.core.stats import clustered_bootstrap
    from icml26.uds.report import figures, summarize

    rows = summarize(runs, arms)
    for r in rows:
        if r["selector"] == "single-source":
            r["selector"] = f"single-source ({family})"
    by = {(r["arm"], r["budget"], r["seed"]): r for r in runs}
    best = min(
        BASELINES, key=lambda n: statistics.fmean(by[(n, b0, s)]["test_loss"] for s in seeds)
    )
    ratios = [by[("uds", b0, s)]["test_loss"] / by[(best, b0, s)]["test_loss"] for s in seeds]
    # seeds are the clusters (each seed draws its own pool, held-out set and init), then the
    # held-out examples within a seed, paired between UDS and the best baseline
    ci = clustered_bootstrap(
        [by[("uds", b0, s)]["test_nll"] for s in seeds],
        [by[(best, b0, s)]["test_nll"] for s in seeds],
        statistic="ratio",
        seed=ctx.seed,
    )
    value = ci.value
    for name, key in (
        ("random-tokens", "random-tokens"),
        (f"single-source ({family})", "single-source"),
    ):
        tm = clustered_bootstrap(
            [by[("uds", b0, s)]["test_nll"] for s in seeds],
            [by[(key, b0, s)]["test_nll"] for s in seeds],
            statistic="ratio",
            seed=ctx.seed,
        )
        rows.append(
            {
                "selector": f"UDS / {name}",
                "budget": b0,
                "held-out loss": None,
                "ratio": round(tm.value, 4),
                "ratio CI (seeds, then examples)": f"{tm.low:.4f}-{tm.high:.4f}",
            }
        )
    base_loss = [r["test_loss"] for r in base]
    rows.append(
        {
            "selector": BASE_SYSTEM,
            "budget": 0.0,
            "held-out loss": round(statistics.fmean(base_loss), 4),
            "loss min-max": f"{min(base_loss):.4f}-{max(base_loss):.4f}",
            "exact match": round(statistics.fmean(r["exact_match"] for r in base), 4),
            "seeds": len(base),
        }
    )
    head_arms = [*BASELINES, "uds", *CONTROL_ARMS]
    tokens = {
        RESPONSE_TOKENS: budget_record(
            {a: statistics.fmean(by[(a, b0, s)]["n_loss_tokens"] for s in seeds) for a in head_arms}
        ),
        "all tokens trained (prompt + response)": budget_record(
            {a: statistics.fmean(by[(a, b0, s)]["n_tokens"] for s in seeds) for a in head_arms}
        ),
    }
    checks = _power_checks(by, seeds, b0, family, base_loss, sc.epochs)
    figs = figures(runs, arms, ctx.out_dir)
    cost = step_cost(sc, seeds[0], lr, alpha, device)
    rows.append(
        {
            "selector": f"step cost, CPU s: UDS@{b0:g} / full",
            "budget": b0,
            "held-out loss": None,
            "UDS step s": round(cost["uds"], 4),
            "of which scoring s": round(cost["uds_scoring"], 4),
            "full step s": round(cost["full"], 4),
            "ratio": round(cost["uds"] / cost["full"], 3),
        }
    )
    t_uds = statistics.fmean(
        by[("uds", b0, s)]["time_scoring_s"] + by[("uds", b0, s)]["time_training_s"] for s in seeds
    )
    t_full = statistics.fmean(
        by[("full", 1.0, s)]["time_scoring_s"] + by[("full", 1.0, s)]["time_training_s"]
        for s in seeds
    )
    notes = [
        f"Data built offline from a seed (not the paper's MMLU/Qwen2.5-7B LoRA setting): {sc.pool.n_train} "
        f"instruction pairs <= {sc.max_len} tokens from families {', '.join(sc.pool.families)}"
        + (
            " (Wikipedia 'What is TITLE?' -> first two sentences; reasoning-gym-style basic arithmetic; "
            "GSM-symbolic-style word problems ending 'The answer is N.'; HumanEval signature + first docstring "
            "sentence -> canonical solution, 40 problems held out)"
            if sc.lm is not None
            else ""
        )
        + f"; {sc.pool.dup_frac:.0%} of the pool repeats {sc.pool.n_templates} fixed examples, "
        f"{sc.pool.noise_frac:.0%} have random responses; the held-out set ({sc.pool.n_test}) is clean, balanced "
        "over families and unseen. 'answer match' is teacher-forced exact match over the answer tokens (each computed "
        "'= N' of a worked word problem, the whole response otherwise).",
        (
            f"Model: from-scratch byte-level tiny_llama (hidden {sc.hidden}, {sc.layers} layers), not a pretrained LM "
            "with LoRA"
            if sc.lm is None
            else f"Model: {sc.lm} (bf16 base on CPU) with LoRA r=8, alpha=16 on the 7 "
            "projections, as the official script (Qwen2.5-7B there)"
        )
        + "; response-only loss and scoring (padding and prompt masked).",
        f"Each arm: {sc.epochs} epoch{'s' if sc.epochs != 1 else ''}, {sc.candidates} candidates per optimizer "
        "step, the same pool order, AdamW, "
        + (
            f"one LR ({lr:g}) chosen on the full-data arm's validation loss {val} "
            f"(core.stats.bracket from {list(sc.lrs)}, +{LR_EXTEND} per extension, at most "
            f"{LR_CAP}: " + ("interior)." if tr.interior else "still at the grid's edge after "
                             "the cap: the LR may not be tuned).")
            if val
            else f"one LR ({lr:g}), fixed (a single LR was given, so none was tuned)."
        ),
        f"Headline: held-out loss of UDS / best baseline ({best}) at budget {b0:g} (summed NLL over "
        f"the held-out tokens of {len(seeds)} seeds, i.e. the per-token ratio); interval: clustered "
        f"bootstrap, seeds then held-out examples (paired), 95%; per-seed ratios "
        f"{', '.join(f'{x:.3f}' for x in ratios)}.",
        "Budgets: at an equal example budget the arms train on different token counts (UDS picks "
        "long responses); response tokens trained, relative to the arm with the fewest: "
        + "; ".join(f"{a} {tokens[RESPONSE_TOKENS]['ratio_to_min'][a]:.2f}x" for a in head_arms)
        + " (record: budgets, also all tokens). 'random-tokens' is Random "
        "that keeps taking random candidates of the same windows until it has trained on as many "
        "response tokens as UDS (same steps, more examples per step): the token-matched row.",
        f"Power checks: control = single-source selection (each window's {family} candidates "
        "first, random others only to fill K) against Random at the same example budget; floor = "
        "the model before fine-tuning on the same held-out set; degeneracy = UDS's picks that "
        "Random also picks in the same window (chance: the budget fraction).",
        f"UDS alpha={alpha:g} (official default), FJLT 8x128, FIFO 1024, selection over the whole optimizer-step "
        "window (scope='step'; the official code selects per micro-batch).",
        f"Per-step CPU time UDS@{b0:g} / full, scoring included: {cost['uds'] / cost['full']:.2f} (median of 5 "
        f"windows of {sc.candidates}; paper's FLOP estimate 0.58 at 25%). Run wall-clock UDS / full: "
        f"{t_uds / t_full:.2f}, but run wall times were measured on a shared, unevenly loaded machine.",
    ]
    return Result(
        rows=rows,
        headline=Measure(
            f"held-out loss UDS / {best} at {b0:.0%}",
            value,
            "x",
            ci.spread,
            higher_is_better=False,
        ),
        target=1.0,
        notes=notes,
        figures=figs,
        power=checks,
        budgets=tokens,
        tuning=tuning,
    )


def _power_checks(by, seeds, b0, family, base_loss, epochs) -> list:
    """Control: Random vs the single-source selection (held-out loss, min-max over seeds);
    floor: the model before fine-tuning; degeneracy: UDS's picks not shared with Random."""
    from icml26.core import power

    def losses(a):
        return [by[(a, b0, s)]["test_loss"] for s in seeds]

    def rng(x):
        return (min(x), max(x))

    rnd, one = losses("random"), losses("single-source")
    control = power.control(
        "random",
        statistics.fmean(rnd),
        f"single-source ({family})",
        statistics.fmean(one),
        spread=rng(rnd),
        null_spread=rng(one),
        higher_is_better=False,
        metric=f"held-out loss at {b0:g} (min-max over seeds)",
        name="positive control: selection moves held-out loss",
    )
    compared = {a: statistics.fmean(losses(a)) for a in (*BASELINES, "uds")}
    floor = power.floor(
        compared,
        BASE_SYSTEM,
        statistics.fmean(base_loss),
        spreads={a: rng(losses(a)) for a in compared},
        floor_spread=rng(base_loss),
        higher_is_better=False,
        metric="held-out loss",
    )
    shared = total = 0
    for s in seeds:
        sh, tot = pick_overlap(
            by[("uds", b0, s)]["selected"], by[("random", b0, s)]["selected"], epochs
        )
        shared, total = shared + sh, total + tot
    degeneracy = power.degeneracy(
        ("uds", "random"),
        total - shared,
        total,
        min_differing=max(1, round(0.1 * total)),
        what=f"UDS picks (not also picked by Random; {shared / max(total, 1):.0%} shared, chance "
        f"{b0:.0%})",
    )
    return [control, floor, degeneracy]
