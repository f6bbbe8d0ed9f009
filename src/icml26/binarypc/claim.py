"""Claim ``binarypc``: at a 2% budget BinaryPC keeps more attention mass than LSH and Quest.

Each context (Wikipedia test split, concatenated) is prefilled once, densely, recording the
post-RoPE q/k/v of every layer (:func:`capture_qkv`). The last ``n_pos`` positions play decode
steps: the first P = L − n_pos tokens are the prefill (hashed / paged / scored), later ones are
decode tokens that every method always keeps, and the query at position t sees keys 0..t. This
is exactly what the patched model computes at those decode steps (the K/V of a dense prefill).
Every method gets the same total budget k = max(⌊ctx·frac⌋, 128) per KV head, counting decode
tokens, sinks and BinaryPC's error set.

Measures per (layer, position): attention-mass recall (true softmax mass on the selected tokens,
mean over query heads), oracle recall@k, ‖o − o_dense‖/‖o_dense‖. Headline: BinaryPC mass recall
at 2% / the best of SimHash, MagicPIG, Quest and Loki (r = 16), with a 95% clustered bootstrap
CI (contexts, then (layer, position) items within each). Power checks: oracle top-k vs random-k
(control), the better of random-k and StreamingLLM (floor), identical BinaryPC / best-baseline
selections (degeneracy).

Options: ``model`` (HF folder / .gguf; default the packaged SmolLM2), ``dtype`` (fp32),
``lengths`` (comma-separated context lengths), ``positions`` (decode positions per context),
``layer_step`` (evaluate every n-th layer from 2).
"""

from __future__ import annotations

import numpy as np
import torch

from icml26.binarypc.codes import binary_pcs
from icml26.binarypc.methods import BinaryPCConfig, make_method, metadata_bytes
from icml26.binarypc.patch import capture_qkv, expand_meta, sparse_decode
from icml26.binarypc.select import budget, dense_attention
from icml26.core import power
from icml26.core.checkpoint import Memo, source_fingerprint
from icml26.core.claims import Measure, Result, RunContext
from icml26.core.errors import UserError
from icml26.core.lm import load_lm
from icml26.core.plots import pyplot, save_figure
from icml26.core.stats import clustered_bootstrap
from icml26.core.text import token_ids
from icml26.core.torchutil import bootstrap_ci, check_device, parse_dtype

TARGET = 1.0
HEAD_FRAC = 0.02
VARIANTS = {  # label -> config overrides
    "BinaryPC": {"method": "bpc"},
    "BinaryPC, no error set": {"method": "bpc", "err_ratio": 0.0},
    "BinaryPC, offline directions": {"method": "bpc"},
    "SimHash-64 (LSH)": {"method": "simhash"},
    "MagicPIG (K=10, L=150)": {"method": "magicpig"},
    "Quest (page 16)": {"method": "quest"},
    "Loki (r=16)": {"method": "loki", "loki_rank": 16},
    "Loki (r=4, 8 B)": {"method": "loki", "loki_rank": 4},
    "StreamingLLM (4 sinks)": {"method": "streaming"},
    "Oracle top-k": {"method": "oracle"},
    "Random-k": {"method": "random"},
}
# the paper-named baselines at their standard settings (Loki: r = d/4, its default d_f = 0.25);
# "Loki (r=4, 8 B)" is the memory-matched row (8 B/token/head, as BinaryPC), not in the headline
BASELINES = ("SimHash-64 (LSH)", "MagicPIG (K=10, L=150)", "Quest (page 16)", "Loki (r=16)")


def selection_mask(sel: torch.Tensor, Hq: int, L: int) -> torch.Tensor:
    """(B, Hq, L) bool of what each query head attended: from indices (B, Hkv, k) (shared by a
    GQA group) or a per-query-head mask (B, Hq, L) already."""
    if sel.dtype == torch.bool:
        return sel
    B, Hkv, _ = sel.shape
    m = torch.zeros((B, Hkv, L), dtype=torch.bool).scatter_(2, sel, True)
    return m.repeat_interleave(Hq // Hkv, dim=1)


@torch.no_grad()
def evaluate_context(qkv, layers, n_pos, fracs, seed, offline=None, scaling=None, progress=None):
    """Metrics for one context. qkv: per-layer (q, k, v) of shape (1, H, L, D).
    Returns a list of dicts (one per variant, budget, layer) with per-position arrays."""
    out = []
    for li in layers:
        q, k, v = (t.float() for t in qkv[li])
        L, D = k.shape[2], k.shape[3]
        P = L - n_pos
        sc = scaling if scaling is not None else D**-0.5
        qs = q[0, :, P:].transpose(0, 1)  # (n_pos, Hq, D)
        keys, vals = k.expand(n_pos, -1, -1, -1), v.expand(n_pos, -1, -1, -1)
        pos = torch.arange(L)
        positions = P + torch.arange(n_pos)
        allowed = pos[None, :] <= positions[:, None]  # (n_pos, L)
        o_ref, w = dense_attention(qs, keys, vals, sc, allowed=allowed)
        Hq = q.shape[1]
        layer_rows = {}
        for label, over in VARIANTS.items():
            if label.endswith("offline directions") and offline is None:
                continue
            m = make_method(BinaryPCConfig(**over, seed=seed))
            d = offline[li] if label.endswith("offline directions") else None
            gen = torch.Generator().manual_seed(seed * 1000 + li)
            meta = expand_meta(m.prepare(k[:, :, :P], gen, d), n_pos)
            meta["memo"] = {}
            for frac in fracs:
                kk = budget(P, 1.0 - frac, 128)
                o, sel = sparse_decode(
                    m, meta, P, qs, keys, vals, sc, kk, allowed=allowed, positions=positions
                )
                mask = selection_mask(sel, Hq, L)  # (n_pos, Hq, L)
                mass = (w * mask).sum(-1)
                err = (o - o_ref).norm(dim=-1) / o_ref.norm(dim=-1).clamp_min(1e-12)
                layer_rows[label, frac] = {
                    "variant": label,
                    "frac": frac,
                    "k": kk,
                    "layer": li,
                    "P": P,
                    "mass": mass.mean(1).numpy(),
                    "err": err.mean(1).numpy(),
                    "attended": mask.sum(-1).float().mean(1).numpy(),
                    "mask": mask,
                }
        for (_label, frac), r in layer_rows.items():
            omask = layer_rows["Oracle top-k", frac]["mask"]
            r["recall"] = ((r["mask"] & omask).sum(-1).float() / r["k"]).mean(1).numpy()
        for (label, frac), r in layer_rows.items():  # BinaryPC's selections against each baseline's
            if label != "BinaryPC":
                continue
            for b in BASELINES:
                bm = layer_rows[b, frac]["mask"]
                r[f"same:{b}"] = (r["mask"] == bm).flatten(1).all(1).float().numpy()
                r[f"shared:{b}"] = (
                    ((r["mask"] & bm).sum(-1).float() / r["mask"].sum(-1).clamp_min(1))
                    .mean(1)
                    .numpy()
                )
        for r in layer_rows.values():
            del r["mask"]
            out.append(r)
        if progress is not None:
            progress(1)
    return out


PPL_VARIANTS = (
    "BinaryPC",
    "SimHash-64 (LSH)",
    "MagicPIG (K=10, L=150)",
    "Quest (page 16)",
    "StreamingLLM (4 sinks)",
    "Oracle top-k",
)
PASSKEY_VARIANTS = ("BinaryPC", "SimHash-64 (LSH)", "MagicPIG (K=10, L=150)", "Quest (page 16)")
PASSKEY_MIN_DENSE = 0.8


RECALL_ARRAYS = ("mass", "err", "attended", "recall")  # per-position arrays of a recall record
PAIR_PREFIXES = ("same:", "shared:")  # BinaryPC vs a baseline, per position (BinaryPC records)


def _ints(ctx, name, default):
    if name not in ctx.options:
        return default
    try:
        return [int(x) for x in str(ctx.options[name]).split(",") if x.strip()]
    except ValueError:
        raise UserError(
            f"option {name}: expected comma-separated ints; got {ctx.options[name]!r}"
        ) from None


def run(ctx: RunContext) -> Result:
    device = check_device(ctx.device)
    dtype = parse_dtype(ctx.options.get("dtype", "fp32"))
    lengths = _ints(
        ctx,
        "lengths",
        ctx.pick(tiny=[1024], small=[2048] * 4 + [4096] * 4 + [8192] * 4, full=[8192] * 12),
    )
    n_pos = int(ctx.options.get("positions", ctx.pick(tiny=8, small=48, full=48)))
    layer_step = int(ctx.options.get("layer_step", ctx.pick(tiny=1, small=1, full=1)))
    fracs = ctx.pick(tiny=[0.02], small=[0.02, 0.05, 0.10], full=[0.02, 0.05, 0.10])
    ppl_prefix = int(ctx.options.get("ppl_prefix", ctx.pick(tiny=160, small=4096, full=4096)))
    ppl_tokens = int(ctx.options.get("ppl_tokens", ctx.pick(tiny=8, small=256, full=256)))
    ppl_seqs = int(ctx.options.get("ppl_seqs", ctx.pick(tiny=1, small=2, full=4)))
    pk_lengths = _ints(
        ctx, "passkey_lengths", ctx.pick(tiny=[256], small=[2048, 4096, 8192], full=[8192])
    )
    pk_trials = _ints(ctx, "passkey_trials", ctx.pick(tiny=[1], small=[10, 10, 5], full=[10]))
    if len(pk_trials) != len(pk_lengths):
        raise UserError(
            f"options passkey_trials {pk_trials} and passkey_lengths {pk_lengths} differ in length"
        )
    model, tok = load_lm(ctx.options.get("model"), dtype=dtype, device=device)
    n_layers = model.config.num_hidden_layers
    layers = ctx.pick(
        tiny=list(range(2, min(6, n_layers))),
        small=list(range(2, n_layers, layer_step)),
        full=list(range(2, n_layers, layer_step)),
    )
    if not layers:
        raise UserError(f"the model has {n_layers} layers; BinaryPC keeps layers 0-1 dense")
    max_pos = model.config.max_position_embeddings
    longest = max([*lengths, ppl_prefix + ppl_tokens + 1, *pk_lengths])
    if longest > max_pos:
        raise UserError(f"context {longest} exceeds the model's {max_pos} positions")
    need = sum(lengths) + ppl_seqs * (ppl_prefix + ppl_tokens + 1)
    ids = token_ids(tok, "test", max_tokens=need)
    if ids.numel() < need:
        raise UserError(f"the test split has {ids.numel()} tokens; need {need}")
    n_calib = ctx.pick(tiny=512, small=2048, full=8192)
    calib = token_ids(tok, "train", max_tokens=n_calib)
    cq, _ = capture_qkv(model, calib.reshape(1, -1))  # same procedure as calibrate(), fewer layers
    gen = torch.Generator().manual_seed(ctx.seed)
    offline = {li: binary_pcs(cq[li][1][0].float().cpu(), 64, 4, generator=gen) for li in layers}
    del cq

    # Each finished stage unit (a context, the perplexity study, a passkey length) is kept in a
    # memo: a crash or Ctrl-C resumes from it; changed options or code start afresh.
    memo = Memo(
        ctx.out_dir / "memo.json",
        config={
            "scale": ctx.scale,
            "seed": ctx.seed,
            "model": str(ctx.options.get("model")),
            "dtype": str(dtype),
            "lengths": lengths,
            "positions": n_pos,
            "layers": layers,
            "fracs": fracs,
            "ppl": [ppl_prefix, ppl_tokens, ppl_seqs],
            "passkey": [pk_lengths, pk_trials],
            "code": source_fingerprint("icml26.binarypc"),
        },
    )

    # 1. attention-mass recall on shared dense prefills
    records, start = [], 0
    tick = ctx.progress.task("recall: contexts × layers", total=len(lengths) * len(layers))
    scaling = model.model.layers[0].self_attn.scaling

    def context_records(L, start):  # the memo stores the arrays as lists (Memo.put)
        qkv, _ = capture_qkv(model, ids[start : start + L].reshape(1, -1))
        qkv = [tuple(t.cpu() for t in x) for x in qkv]
        return evaluate_context(qkv, layers, n_pos, fracs, ctx.seed, offline, scaling, tick)

    for ci, L in enumerate(lengths):
        if f"recall/{ci}" in memo:
            tick(len(layers))
        for r in memo.compute(f"recall/{ci}", lambda L=L, s=start: context_records(L, s)):
            # a new dict: the memo's own unit stays plain JSON
            arrays = [k for k in r if k in RECALL_ARRAYS or k.startswith(PAIR_PREFIXES)]
            records.append({**r, **{k: np.asarray(r[k]) for k in arrays}, "ctx": ci, "L": L})
        start += L

    rows = []
    D = model.config.hidden_size // model.config.num_attention_heads
    D = getattr(model.config, "head_dim", None) or D
    for frac in fracs:
        for label, over in VARIANTS.items():
            rs = [r for r in records if r["variant"] == label and r["frac"] == frac]
            if not rs:
                continue
            mass = np.concatenate([r["mass"] for r in rs])
            rows.append(
                {
                    "study": "recall",
                    "method": label,
                    "budget": f"{frac:.0%}",
                    "effective budget (tokens, per length)": ", ".join(
                        sorted({f"{r['L']}:{r['k']}" for r in rs})
                    ),
                    "attended (mean tokens per query head)": round(
                        float(np.concatenate([r["attended"] for r in rs]).mean()), 1
                    ),
                    "attention-mass recall": round(float(mass.mean()), 4),
                    "min over contexts": round(
                        min(
                            float(np.concatenate([r["mass"] for r in rs if r["ctx"] == c]).mean())
                            for c in {r["ctx"] for r in rs}
                        ),
                        4,
                    ),
                    "oracle recall@k": round(
                        float(np.concatenate([r["recall"] for r in rs]).mean()), 4
                    ),
                    "rel. output error": round(
                        float(np.concatenate([r["err"] for r in rs]).mean()), 4
                    ),
                    "metadata B/token/head": metadata_bytes(BinaryPCConfig(**over), D),
                }
            )

    best = max(BASELINES, key=lambda b: float(np.concatenate(context_clusters(records, b)).mean()))
    head = clustered_bootstrap(
        context_clusters(records, "BinaryPC"),
        context_clusters(records, best),
        statistic="ratio",
        seed=ctx.seed,
    )
    value, spread = head.value, head.spread
    checks, p_rows = power_checks(records, best, ctx.seed)
    rows += p_rows

    # 2. perplexity of a continuation with every decode query sparse (one replay per method)
    from icml26.binarypc.decode_eval import passkey_config, passkey_study, perplexity_study

    seqs, n_seq = [], ppl_prefix + ppl_tokens + 1
    for _ in range(ppl_seqs):
        seqs.append(ids[start : start + n_seq])
        start += n_seq
    ppl_cfgs = {
        lab: passkey_config(HEAD_FRAC, **VARIANTS[lab], seed=ctx.seed)
        for lab in (PPL_VARIANTS if ctx.scale != "tiny" else PPL_VARIANTS[:1])
    }
    tick = ctx.progress.task("perplexity: sequences × methods", total=ppl_seqs * len(ppl_cfgs))
    if seqs and "perplexity" in memo:
        tick(ppl_seqs * len(ppl_cfgs))
    nll = {
        k: np.asarray(v)
        for k, v in memo.compute(
            "perplexity",
            lambda: (
                perplexity_study(model, seqs, ppl_prefix, ppl_cfgs, progress=tick) if seqs else {}
            ),
        ).items()
    }
    dense_nll = nll.get("Dense")
    ppl_ratio = {}
    for label, x in nll.items():
        r = float(np.exp(x.mean() - dense_nll.mean()))
        ppl_ratio[label] = r
        lo, hi = bootstrap_ci(
            lambda a, b: float(np.exp(a.mean() - b.mean())), x, dense_nll, seed=ctx.seed
        )
        rows.append(
            {
                "study": "perplexity",
                "method": label,
                "budget": "100%" if label == "Dense" else f"{HEAD_FRAC:.0%}",
                "effective budget (tokens, per length)": "dense"
                if label == "Dense"
                else f"{ppl_prefix}+: {budget(ppl_prefix + 1, 1 - HEAD_FRAC, 128)}",
                "perplexity": round(float(np.exp(x.mean())), 3),
                "ppl ratio to dense": round(r, 4),
                "ratio 95% CI": f"[{lo:.4f}, {hi:.4f}]",
                "tokens": int(x.size),
            }
        )

    # 3. passkey: dense accuracy first; lengths where dense < 80% are uninformative
    pk_recs = []
    if pk_lengths and sum(pk_trials) > 0:
        filler = ids[start:] if ids.numel() - start > 2 * max(pk_lengths) else ids
        pk_cfgs = {
            lab: passkey_config(HEAD_FRAC, **VARIANTS[lab], seed=ctx.seed)
            for lab in (PASSKEY_VARIANTS if ctx.scale != "tiny" else PASSKEY_VARIANTS[:1])
        }
        tick = ctx.progress.task("passkey trials", total=sum(pk_trials))
        for L, n in zip(pk_lengths, pk_trials, strict=True):
            key = f"passkey/{L}x{n}"
            if key in memo:
                tick(n)
            pk_recs += memo.compute(
                key,
                lambda L=L, n=n: passkey_study(
                    model,
                    tok,
                    filler,
                    [L],
                    [n],
                    pk_cfgs,
                    seed=ctx.seed * 100_003 + L,
                    progress=tick,
                ),
            )
    uninformative_lengths = []
    for L in pk_lengths:
        dense_acc = np.mean(
            [r["exact"] for r in pk_recs if r["length"] == L and r["method"] == "Dense"]
        )
        informative = dense_acc >= PASSKEY_MIN_DENSE
        if not informative:
            uninformative_lengths.append(L)
        for label in dict.fromkeys(r["method"] for r in pk_recs):
            rs = [r for r in pk_recs if r["length"] == L and r["method"] == label]
            rows.append(
                {
                    "study": "passkey",
                    "method": label,
                    "budget": "100%" if label == "Dense" else f"{HEAD_FRAC:.0%}",
                    "effective budget (tokens, per length)": "dense"
                    if label == "Dense"
                    else f"{L}:{budget(L + 1, 1 - HEAD_FRAC, 128)}",
                    "context": L,
                    "trials": len(rs),
                    "exact match": round(float(np.mean([r["exact"] for r in rs])), 3),
                    "key log-lik (mean, nats)": round(
                        float(np.mean([r["key_loglik"] for r in rs])), 3
                    ),
                    "informative (dense >= 80%)": bool(informative),
                }
            )

    figs = _figures(ctx, records, fracs, layers)
    if pk_recs:
        figs.append(_passkey_figure(ctx, pk_recs))
    notes = [
        f"Recall: contexts of {lengths} tokens from the Wikipedia test split; the last {n_pos} "
        f"positions of each are decode steps; layers {layers} (0-1 dense as in the paper).",
        "Budget per KV head k = max(floor(prefill*frac), 128), counting decode tokens, sinks and "
        "BinaryPC's 10% error set; for short contexts 128 tokens exceed 2%, see the effective "
        "budget column. MagicPIG (K=10, L=150, >=2 collisions, 4 sinks + 64-token window, "
        "importance-weighted output) samples per query head and is thinned to k when its sample "
        "is larger; 'attended' is what it really read.",
        f"Offline directions: greedy binary PCs of {n_calib} train-split tokens' keys per layer.",
        "BinaryPC follows the official bpc_pytorch.py rules: an error set of max(int(0.1*k), 1) "
        "tokens and one int8 query scale per GQA group (before issue 35: round(0.1*k) and one "
        "scale per query head). Loki: the top-r eigenvectors of the prefill keys' K^T K per KV "
        "head (online, as BinaryPC's directions), r = 16 (its d/4 default, 32 B/token/head) in "
        "the headline, r = 4 (8 B, BinaryPC's memory) as a row.",
        f"Perplexity: {ppl_seqs} test sequences, {ppl_prefix}-token dense prefill then "
        f"{ppl_tokens} decode steps with every query sparse (2% budget), one forward with a "
        "per-query selection (sparse_replay, proven equal to step-by-step decode); CI: bootstrap "
        "over tokens.",
        f"Passkey: lengths {pk_lengths}, trials {pk_trials}, depths 0.1-0.9, greedy 8 tokens, "
        "2% budget, one dense prefill shared by all methods (prime() = the patched prefill). "
        + (
            f"Dense SmolLM2 scores < 80% at {uninformative_lengths}: those lengths are "
            "uninformative."
            if uninformative_lengths
            else "Dense >= 80% at every length."
        ),
        f"Headline spread: 95% clustered bootstrap over {head.n_clusters} context(s) (the unit that "
        f"varies), then (layer, position) items within each ({head.n_items} items); the best baseline "
        f"({best}, highest pooled mass recall) is fixed. "
        + (
            "One context: the context-level variance is absent at this scale."
            if head.n_clusters == 1
            else ""
        ),
        "Power at 2%: " + "; ".join(c.reason for c in checks) + ".",
    ]
    return Result(
        rows=rows,
        headline=Measure(
            "mass recall @2%: BinaryPC / best(SimHash, MagicPIG, Quest, Loki)",
            value,
            "x",
            spread,
            higher_is_better=True,
        ),
        target=TARGET,
        notes=notes,
        figures=figs,
        power=checks,
    )


def context_clusters(records, label, key="mass", frac=HEAD_FRAC) -> list[np.ndarray]:
    """Per context (the cluster), the per-(layer, position) values of ``key`` for ``label``."""
    rs = [r for r in records if r["variant"] == label and r["frac"] == frac]
    ctxs = sorted({r["ctx"] for r in rs})
    return [
        np.concatenate([r[key] for r in sorted(rs, key=lambda r: r["layer"]) if r["ctx"] == c])
        for c in ctxs
    ]


def power_checks(records, best: str, seed: int = 0, frac=HEAD_FRAC) -> tuple[list, list[dict]]:
    """Power checks on the recall records at ``frac``, with contexts as the bootstrap clusters.

    control: oracle top-k against random-k (mass recall intervals must separate); floor: the best
    trivial selection (random-k or StreamingLLM's sinks + recent window), which BinaryPC or a
    baseline must beat; degeneracy: (context, layer, position) units whose BinaryPC selection is
    not identical to the best baseline's (every query head, every key)."""
    ci = {
        lab: clustered_bootstrap(
            context_clusters(records, lab, frac=frac), statistic="mean", seed=seed
        )
        for lab in ("BinaryPC", *BASELINES, "Oracle top-k", "Random-k", "StreamingLLM (4 sinks)")
    }
    trivial = max(("Random-k", "StreamingLLM (4 sinks)"), key=lambda lab: ci[lab].value)
    same = np.concatenate(context_clusters(records, "BinaryPC", f"same:{best}", frac))
    metric = f"attention-mass recall @{frac:.0%}"
    checks = [
        power.control(
            "Oracle top-k",
            ci["Oracle top-k"].value,
            "Random-k",
            ci["Random-k"].value,
            spread=ci["Oracle top-k"].spread,
            null_spread=ci["Random-k"].spread,
            metric=metric,
        ),
        power.floor(
            {lab: ci[lab].value for lab in ("BinaryPC", *BASELINES)},
            trivial,
            ci[trivial].value,
            floor_spread=ci[trivial].spread,
            metric=metric,
        ),
        power.degeneracy(
            ("BinaryPC", best),
            float((same < 1).sum()),
            float(same.size),
            what="(context, layer, position) selections",
        ),
    ]
    rows = []
    for b in BASELINES:
        r = clustered_bootstrap(
            context_clusters(records, "BinaryPC", frac=frac),
            context_clusters(records, b, frac=frac),
            statistic="ratio",
            seed=seed,
        )
        s_b = np.concatenate(context_clusters(records, "BinaryPC", f"same:{b}", frac))
        share = np.concatenate(context_clusters(records, "BinaryPC", f"shared:{b}", frac))
        rows.append(
            {
                "study": "power",
                "method": b,
                "budget": f"{frac:.0%}",
                "BinaryPC / this, mass recall": round(r.value, 4),
                "95% CI (contexts, then items)": f"[{r.low:.4f}, {r.high:.4f}]",
                "units with BinaryPC's selection identical": f"{int(s_b.sum())}/{s_b.size}",
                "mean share of BinaryPC's selection also selected": round(float(share.mean()), 4),
            }
        )
    for lab in ("Oracle top-k", "Random-k", "StreamingLLM (4 sinks)"):
        rows.append(
            {
                "study": "power",
                "method": lab,
                "budget": f"{frac:.0%}",
                "mass recall 95% CI (contexts, then items)": f"{ci[lab].value:.4f} [{ci[lab].low:.4f}, {ci[lab].high:.4f}]",
            }
        )
    return checks, rows


def _passkey_figure(ctx, recs):
    plt = pyplot()
    methods = list(dict.fromkeys(r["method"] for r in recs))
    lengths = sorted({r["length"] for r in recs})
    depths = sorted({r["depth"] for r in recs})
    fig, axes = plt.subplots(1, len(methods), figsize=(2.6 * len(methods), 3), squeeze=False)
    for ax, m in zip(axes[0], methods, strict=True):
        grid = np.full((len(depths), len(lengths)), np.nan)
        for i, d in enumerate(depths):
            for j, L in enumerate(lengths):
                xs = [
                    r["exact"]
                    for r in recs
                    if r["method"] == m and r["depth"] == d and r["length"] == L
                ]
                if xs:
                    grid[i, j] = np.mean(xs)
        ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(lengths)), [str(L) for L in lengths], fontsize=7)
        ax.set_yticks(range(len(depths)), [f"{d:.1f}" for d in depths], fontsize=7)
        ax.set_title(m, fontsize=8)
        ax.set_xlabel("context")
    axes[0][0].set_ylabel("needle depth")
    fig.suptitle("Passkey exact match (greedy, 2% budget)", fontsize=9)
    return save_figure(fig, ctx.out_dir / "passkey_grid.png")


def _figures(ctx, records, fracs, layers):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for label in VARIANTS:
        ys = [
            np.concatenate([r["mass"] for r in records if r["variant"] == label and r["frac"] == f])
            for f in fracs
            if any(r["variant"] == label for r in records)
        ]
        if ys:
            ax.plot([100 * f for f in fracs], [y.mean() for y in ys], marker="o", label=label)
    ax.set_xlabel("budget (% of context; floor 128 tokens)")
    ax.set_ylabel("attention-mass recall")
    ax.set_title("Attention mass kept vs budget")
    ax.legend(fontsize=7)
    p1 = save_figure(fig, ctx.out_dir / "recall_vs_budget.png")
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for label in VARIANTS:
        ys = [
            np.concatenate(
                [
                    r["err"]
                    for r in records
                    if r["variant"] == label and r["frac"] == fracs[0] and r["layer"] == li
                ]
            )
            for li in layers
            if any(r["variant"] == label for r in records)
        ]
        if ys:
            ax.plot(layers, [y.mean() for y in ys], marker=".", label=label)
    ax.set_yscale("log")
    ax.set_xlabel("layer")
    ax.set_ylabel("‖o − o_dense‖ / ‖o_dense‖")
    ax.set_title(f"Output error per layer at {fracs[0]:.0%} budget")
    ax.legend(fontsize=7)
    p2 = save_figure(fig, ctx.out_dir / "error_per_layer.png")
    return [p1, p2]
