"""The ``cat`` claim: raising alignment as well as concentration lowers 4-bit error; block CAT
matches or beats the transform baselines (SmoothQuant, randomized Hadamard, QuaRot) at W4A4.

Headline: W4A4 perplexity of CAT (block 64) / the best of {SmoothQuant a=0.5, Hadamard, QuaRot}
(those in the run), perplexity
averaged (geometric mean) over calibration seeds; spread = 95% two-stage bootstrap: calibration
seeds first, then test windows within each drawn seed (windows paired across arms). Target: < 1.0.

Power checks: the positive control is the unquantized model against W4A4 RTN with no transform
(quantization must hurt beyond both perplexities' window-bootstrap CIs, or there is no error for a
transform to remove); the floor is an add-one unigram of the train split scored on the same test
positions (CAT or a transform baseline must beat it). No degeneracy check: each transform is a
different fixed map.

Options (``--opt key=value``): ``model`` (HF folder or .gguf; default packaged SmolLM2),
``dtype`` (default: the dtype policy, bf16 only where native), ``seq_len`` (512), ``block`` (64), ``damp`` (1e-3), ``seeds`` (number of
calibration seeds; 3 at small), ``full_cat`` (0 drops the full-CAT arm), ``quarot`` (0 drops QuaRot), ``w4a8`` (0 drops W4A8),
``n_calib`` (calibration
sequences), ``ppl_tokens`` (test tokens), ``sqnr_blocks`` (256-token blocks for layer SQNR).
"""

from __future__ import annotations

import copy
import math

import numpy as np

from icml26.cat.model import build_transforms, collect_covariances, fake_quantize, layer_sqnr
from icml26.cat.quarot import quarot_layer_transforms, quarot_rotate_
from icml26.core import power
from icml26.core.claims import Measure, Result, RunContext
from icml26.core.lm import load_lm, resolve_dtype
from icml26.core.plots import pyplot, save_figure
from icml26.core.sanity import unigram_window_nll
from icml26.core.text import calibration_batches, perplexity, token_blocks, token_ids
from icml26.core.torchutil import bootstrap_ci, check_device

TARGET = 1.0
BASELINES = ("smoothquant", "hadamard", "quarot")
FP = "FP (no quantization)"
UNIGRAM = "unigram, add-one (train split)"


def _arm_spec(arm: str, block: int) -> tuple[str, dict]:
    return {
        "rtn": ("none", {}),
        "smoothquant": ("smoothquant", {"alpha": 0.5}),
        "hadamard": ("hadamard", {}),
        "quarot": ("quarot", {}),
        f"cat-b{block}": ("cat", {"block": block}),
        "cat-full": ("cat", {"block": None}),
    }[arm]


def _headline(nll: dict[str, np.ndarray], n: np.ndarray, cat: str, seed: int, n_boot: int = 2000):
    """nll[arm]: (seeds, windows) summed nats. Ratio ppl(cat)/min ppl(baselines), and a 95%
    clustered bootstrap CI: each replicate draws calibration seeds with replacement, then test
    windows with replacement within each drawn seed (the same draws for every arm: paired), and
    takes the best baseline on the drawn items."""
    k, w = nll[cat].shape
    base = [b for b in BASELINES if b in nll]

    def ratio(sums: dict[str, np.ndarray], ntok) -> np.ndarray:
        return np.exp(sums[cat] / ntok - np.min([sums[b] / ntok for b in base], axis=0))

    value = float(ratio({a: v.sum() for a, v in nll.items()}, k * n.sum()))
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, k, (n_boot, k))  # drawn clusters (calibration seeds)
    wins = rng.integers(0, w, (n_boot, k, w))  # drawn windows within each drawn seed
    ntok = n[wins].sum(axis=(1, 2))
    boots = ratio({a: v[seeds[..., None], wins].sum(axis=(1, 2)) for a, v in nll.items()}, ntok)
    return value, (float(np.quantile(boots, 0.025)), float(np.quantile(boots, 0.975)))


def _ppl_ci(nll: np.ndarray, n: np.ndarray, seed: int) -> tuple[float, float]:
    """95% bootstrap CI over windows of exp(sum nll / sum n)."""
    return bootstrap_ci(lambda a, b: float(np.exp(a.sum() / b.sum())), nll, n, seed=seed)


def power_checks(fp_nll: np.ndarray, a4: dict[str, np.ndarray], uni_nll: np.ndarray,
                 n: np.ndarray, cat: str, seed: int) -> list:
    """control: FP against W4A4 RTN (seed 0's run: RTN is deterministic), each with its window
    bootstrap CI; floor: the unigram against CAT and the transform baselines (geometric-mean
    perplexity over seeds)."""
    rtn = a4["rtn"][0]
    control = power.control(
        FP, math.exp(fp_nll.sum() / n.sum()), "rtn", math.exp(rtn.sum() / n.sum()),
        spread=_ppl_ci(fp_nll, n, seed), null_spread=_ppl_ci(rtn, n, seed),
        higher_is_better=False, metric="test perplexity (W4A4 RTN vs unquantized)",
        name="unquantized vs W4A4 RTN")
    systems = {a: math.exp(a4[a].sum(1).mean() / n.sum()) for a in (cat, *BASELINES) if a in a4}
    floor = power.floor(systems, UNIGRAM, math.exp(uni_nll.sum() / n.sum()),
                        floor_spread=_ppl_ci(uni_nll, n, seed), higher_is_better=False,
                        metric="W4A4 test perplexity")
    return [control, floor]


def run(ctx: RunContext) -> Result:
    device = check_device(ctx.device)
    dtype = resolve_dtype(ctx.options.get("dtype"), device)  # default: the dtype policy
    seq_len = int(ctx.options.get("seq_len", ctx.pick(256, 512, 2048)))
    block = int(ctx.options.get("block", 64))
    damp = float(ctx.options.get("damp", 1e-3))
    n_calib = ctx.pick(tiny=4, small=32, full=128)
    calib_len = ctx.pick(tiny=128, small=256, full=2048)
    ppl_tokens = ctx.pick(tiny=512, small=16_384, full=262_144)
    sqnr_blocks = ctx.pick(tiny=1, small=16, full=16)
    seeds = ctx.pick(tiny=[0], small=[0, 1, 2], full=[0, 1, 2])
    n_calib = int(ctx.options.get("n_calib", n_calib))
    ppl_tokens = int(ctx.options.get("ppl_tokens", ppl_tokens))
    sqnr_blocks = int(ctx.options.get("sqnr_blocks", sqnr_blocks))
    if "seeds" in ctx.options:
        seeds = list(range(int(ctx.options["seeds"])))
    cat = f"cat-b{block}"
    arms4 = ctx.pick(
        tiny=["rtn", "smoothquant", "hadamard", "quarot", cat],
        small=["rtn", "smoothquant", "hadamard", "quarot", cat, "cat-full"],
        full=["rtn", "smoothquant", "hadamard", "quarot", cat, "cat-full"],
    )
    arms8 = ctx.pick(tiny=[], small=list(arms4), full=list(arms4))
    if ctx.options.get("full_cat", "1") == "0":
        arms4 = [a for a in arms4 if a != "cat-full"]
    if ctx.options.get("quarot", "1") == "0":
        arms4 = [a for a in arms4 if a != "quarot"]
    arms8 = [] if ctx.options.get("w4a8", "1") == "0" else [a for a in arms8 if a in arms4]

    model_name = ctx.options.get("model")
    model, tok = load_lm(model_name, dtype=dtype, device=device)
    if ctx.scale == "tiny":  # 2 decoder blocks: the pipeline, not the number, is under test
        model.model.layers = model.model.layers[:2]
        model.config.num_hidden_layers = 2
    label = model_name or "SmolLM2-135M-Instruct (packaged, Q4_1-dequantized)"
    test = token_ids(tok, "test", max_tokens=ppl_tokens)
    held = list(token_blocks(tok, "validation", 256, sqnr_blocks).split(4))

    def ppl_of(m):
        return perplexity(m, tok, ids=test, seq_len=seq_len, max_tokens=None, progress=ctx.progress)

    fp = ppl_of(model)
    n_win = np.array(fp.window_tokens)
    nll4: dict[str, list] = {a: [] for a in arms4}
    nll8: dict[str, list] = {a: [] for a in arms8}
    sqnr_rows: list[dict] = []
    for si, seed in enumerate(seeds):
        calib = calibration_batches(tok, n_calib, calib_len, batch_size=4, seed=seed)
        groups = collect_covariances(model, calib, progress=ctx.progress)
        transforms = {}
        for arm in arms4:
            if arm in ("rtn", "cat-full") and si > 0:
                continue  # deterministic (rtn) or too slow on CPU for every seed (full)
            method, kw = _arm_spec(arm, block)
            if method == "quarot":  # the per-layer view (SQNR); the model is rotated below
                transforms[arm] = quarot_layer_transforms(model, seed=1000 * seed)
                continue
            transforms[arm] = build_transforms(
                model, groups, method, damp=damp, seed=1000 * seed, progress=ctx.progress, **kw
            )
        if si == 0:
            sqnr_rows = layer_sqnr(model, held, transforms, 4, 4, progress=ctx.progress)
        for bits, store in ((4, nll4), (8, nll8)):
            for arm in store:
                if arm not in transforms or (bits == 8 and si > 0):
                    continue  # W4A8: seed 0 only (a secondary row)
                m = copy.deepcopy(model)
                if arm == "quarot":  # residual stream rotated, gains fused, head untied
                    online = quarot_rotate_(m, seed=1000 * seed)
                    fake_quantize(m, 4, bits, transforms=online, fuse=True)
                else:
                    fake_quantize(m, 4, bits, transforms=transforms[arm], fuse=True)
                store[arm].append(np.array(ppl_of(m).window_nll))
                del m
        del groups, transforms
    runs = {(b, a): len(v) for b, st in (("W4A4", nll4), ("W4A8", nll8)) for a, v in st.items()}
    # Arms computed once stand for every seed (rtn is deterministic; cat-full: see notes).
    for store in (nll4, nll8):
        for arm, v in store.items():
            while v and len(v) < len(seeds) and (arm in ("rtn", "cat-full") or store is nll8):
                v.append(v[0])
    a4 = {a: np.stack(v) for a, v in nll4.items()}
    a8 = {a: np.stack(v) for a, v in nll8.items() if v}
    value, spread = _headline(a4, n_win, cat, ctx.seed)
    train = token_ids(tok, "train")
    vocab = max(len(tok), int(test.max()) + 1, int(train.max()) + 1)
    uni_nll, uni_n = unigram_window_nll(train, test, vocab, seq_len)
    if not np.array_equal(uni_n, n_win):
        raise RuntimeError("the unigram and the models must score the same test positions")
    checks = power_checks(np.array(fp.window_nll), a4, uni_nll, n_win, cat, ctx.seed)

    def ppls(v):  # per-seed perplexities
        return [math.exp(s.sum() / n_win.sum()) for s in v]

    med = {}
    for arm in arms4:
        r = [x for x in sqnr_rows if x["arm"] == arm]
        med[arm] = {
            k: float(np.median([x[k] for x in r]))
            for k in ("measured_db", "predicted_db", "concentration_db", "alignment_db")
        }
    had_by_layer = {x["layer"]: x["measured_db"] for x in sqnr_rows if x["arm"] == "hadamard"}
    rows = [{"system": FP, "bits": str(dtype).removeprefix("torch."), "perplexity": round(fp.ppl, 3)},
            {"system": UNIGRAM, "bits": "-",
             "perplexity": round(math.exp(uni_nll.sum() / n_win.sum()), 3)}]
    for bits, arr in (("W4A4", a4), ("W4A8", a8)):
        for arm, v in arr.items():
            p = ppls(v)
            row = {
                "system": arm,
                "bits": bits,
                "perplexity": round(float(np.exp(np.log(p).mean())), 3),
                "ppl min..max over seeds": f"{min(p):.3f}..{max(p):.3f}"
                if runs[(bits, arm)] > 1
                else "one run (seed 0)",
            }
            if bits == "W4A4" and arm in med:
                gains = [
                    x["measured_db"] - had_by_layer[x["layer"]]
                    for x in sqnr_rows
                    if x["arm"] == arm
                ]
                row.update(
                    {
                        "median layer SQNR dB": round(med[arm]["measured_db"], 2),
                        "median gain vs Hadamard dB": round(float(np.median(gains)), 2),
                        "median concentration dB": round(med[arm]["concentration_db"], 2),
                        "median alignment dB": round(med[arm]["alignment_db"], 2),
                    }
                )
            rows.append(row)
    figs = _figures(ctx, sqnr_rows, arms4, rows)
    notes = [
        f"Model: {label}; {len(model.model.layers)} decoder blocks; dtype {dtype}. Its weights went "
        "through Q4_1 (asymmetric, groups of 32 along the input); every arm here uses symmetric "
        "per-output-channel INT4 RTN weights and dynamic symmetric per-token activations, so no "
        "arm shares the Q4_1 grid.",
        f"Calibration: {n_calib} x {calib_len} tokens of the Wikipedia train split per seed "
        f"(seeds {seeds}); perplexity on {fp.n_tokens} test tokens in {seq_len}-token windows; "
        f"per-layer SQNR on {256 * sqnr_blocks} validation tokens (seed 0, W4A4, fp inputs).",
        "Transforms are local to each linear input group ({q,k,v}, o, {gate,up}, down), applied "
        "online except SmoothQuant, folded into RMSNorm gains and up_proj. Hadamard = randomized, "
        "order d (576 = 12*12*4, 1536 = 12*128). LM head and embeddings stay in fp.",
        f"CAT-b{block}: per-block matrix geometric mean of Sigma^-1 and W^T W times a randomized "
        f"Hadamard of order {block} (damp {damp}); the full-CAT arm is computed for seed 0 only "
        "and reused for the other seeds (its spread is not sampled).",
        "QuaRot: the residual stream rotated by one randomized Hadamard of order d with every "
        "RMSNorm gain fused into its readers and the tied head untied (+vocab*d fp parameters), "
        "online randomized Hadamards on the o_proj and down_proj inputs (no KV-cache rotation: "
        "keys/values are not quantized here). 'hadamard' is the layer-local rotation.",
        "The CAT closed form is reconstructed from the abstract (full text unavailable): see "
        "docs/cat.md. SpinQuant and FlatQuant (learned transforms) are not implemented.",
        f"Headline spread: two-stage bootstrap over the {len(seeds)} calibration seed(s), then the "
        f"{len(n_win)} test windows within each drawn seed"
        + ("." if len(seeds) > 1 else "; with one seed, calibration variance is absent from it.")
        + " Power checks: control = FP vs W4A4 RTN (window-bootstrap CIs); floor = an add-one "
        "unigram of the train split on the same test positions.",
    ]
    worst = min(math.exp(v.sum() / len(v) / n_win.sum()) for v in a4.values())
    if worst > 5 * fp.ppl:
        notes.append(f"Degenerate regime: every W4A4 arm exceeds 5x FP perplexity ({fp.ppl:.2f}).")
    return Result(
        rows=rows,
        headline=Measure(
            f"W4A4 ppl {cat} / best of " + ", ".join(b for b in BASELINES if b in a4),
            value,
            "x",
            spread,
            higher_is_better=False,
        ),
        target=TARGET,
        notes=notes,
        figures=figs,
        power=checks,
    )


def _figures(ctx: RunContext, sqnr_rows, arms, rows):
    plt = pyplot()
    layers = sorted(
        {x["layer"] for x in sqnr_rows},
        key=lambda s: [int(t) if t.isdigit() else t for t in s.split(".")],
    )
    fig, ax = plt.subplots(figsize=(10, 3.8))
    for arm in arms:
        by = {x["layer"]: x["measured_db"] for x in sqnr_rows if x["arm"] == arm}
        ax.plot(range(len(layers)), [by[name] for name in layers], ".-", ms=3, lw=0.8, label=arm)
    ax.set_xlabel("linear layer (forward order)")
    ax.set_ylabel("W4A4 SQNR (dB)")
    ax.set_title("Per-layer SQNR by arm (validation tokens)")
    ax.legend(fontsize=8, ncol=len(arms))
    f1 = save_figure(fig, ctx.out_dir / "layer_sqnr.png")
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    for arm in arms:
        r = [x for x in sqnr_rows if x["arm"] == arm]
        ax.scatter(
            [x["concentration_db"] for x in r],
            [x["alignment_db"] for x in r],
            s=8,
            alpha=0.6,
            label=arm,
        )
    ax.set_xlabel("concentration term -10 log10 kappa (dB)")
    ax.set_ylabel("alignment term 10 log10 A (dB)")
    ax.set_title("Concentration vs alignment per layer")
    ax.legend(fontsize=8)
    f2 = save_figure(fig, ctx.out_dir / "conc_align.png")
    fig, ax = plt.subplots(figsize=(8, 3.8))
    labels = [f"{r['system']}\n{r['bits']}" for r in rows]
    ax.bar(range(len(rows)), [r["perplexity"] for r in rows], color="tab:blue")
    ax.set_xticks(range(len(rows)), labels, fontsize=7, rotation=45, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("perplexity (test)")
    ax.set_title("Perplexity by arm")
    f3 = save_figure(fig, ctx.out_dir / "perplexity.png")
    return [f1, f2, f3]
