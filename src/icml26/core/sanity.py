"""The health-check claim ``smollm2-perplexity``: the packaged SmolLM2 reads English.

Not a paper: it proves the frame (model loading, corpus, perplexity, runner, report) end to end.
Perplexity of the model on the Wikipedia test split is compared with a unigram model fitted on
the train split (add-one smoothing over the vocabulary), scored on exactly the same token
positions. Headline: unigram perplexity / model perplexity, with a 95% bootstrap CI over windows.

Power checks: the positive control is the same model on the same test tokens shuffled within each
window (word order destroyed): its perplexity must rise well above the real text's, beyond both
bootstrap CIs. The floor is the unigram itself: the model's perplexity must lie below the unigram's
CI.

Options (``--opt key=value``): ``model`` (HF folder or .gguf; default the packaged SmolLM2),
``dtype`` (default bf16 on CPU, the fast path with unchanged perplexity), ``seq_len`` (512).
"""

from __future__ import annotations

import numpy as np
import torch

from icml26.core import power
from icml26.core.claims import Measure, Result, RunContext
from icml26.core.lm import load_lm, resolve_dtype
from icml26.core.plots import pyplot, save_figure
from icml26.core.text import perplexity, token_ids
from icml26.core.torchutil import bootstrap_ci, check_device

TARGET = 5.0


def unigram_window_nll(
    train_ids: torch.Tensor, test_ids: torch.Tensor, vocab_size: int, seq_len: int
) -> tuple[np.ndarray, np.ndarray]:
    """Summed NLL (nats) and token counts per non-overlapping window, as :func:`perplexity`
    scores them (positions 1..L-1 of each window), under an add-one unigram of ``train_ids``."""
    counts = torch.bincount(train_ids, minlength=vocab_size).double() + 1.0
    logp = torch.log(counts / counts.sum())
    nll, n = [], []
    for start in range(0, test_ids.numel() - 1, seq_len):
        window = test_ids[start : start + seq_len]
        if window.numel() < 2:
            continue
        nll.append(float(-logp[window[1:]].sum()))
        n.append(window.numel() - 1)
    return np.array(nll), np.array(n)


def shuffle_within_windows(ids: torch.Tensor, seq_len: int, seed: int) -> torch.Tensor:
    """The same tokens, each non-overlapping ``seq_len`` window permuted at random (the positive
    control: same unigram content, no word order)."""
    g = torch.Generator().manual_seed(int(seed))
    out = ids.clone()
    for start in range(0, ids.numel(), seq_len):
        w = out[start : start + seq_len]
        out[start : start + seq_len] = w[torch.randperm(w.numel(), generator=g)]
    return out


def window_ppl_ci(nll: np.ndarray, n: np.ndarray, seed: int) -> tuple[float, float]:
    """95% bootstrap CI over windows of the perplexity exp(sum nll / sum n)."""
    return bootstrap_ci(lambda a, b: float(np.exp(a.sum() / b.sum())), nll, n, seed=seed)


def run(ctx: RunContext) -> Result:
    device = check_device(ctx.device)
    dtype = resolve_dtype(ctx.options.get("dtype"), device)  # default: the dtype policy
    seq_len = int(ctx.options.get("seq_len", 512))
    max_tokens = ctx.pick(tiny=2048, small=65_536, full=None)
    model_name = ctx.options.get("model")
    model, tok = load_lm(model_name, dtype=dtype, device=device)
    label = model_name or "SmolLM2-135M-Instruct (packaged)"

    test = token_ids(tok, "test", max_tokens=max_tokens)
    train = token_ids(tok, "train")
    ppl = perplexity(model, tok, ids=test, seq_len=seq_len, max_tokens=None, progress=ctx.progress)
    vocab = max(len(tok), int(test.max()) + 1, int(train.max()) + 1)
    uni_nll, uni_n = unigram_window_nll(train, test, vocab, seq_len)
    model_nll = np.array(ppl.window_nll)
    model_n = np.array(ppl.window_tokens)
    assert np.array_equal(model_n, uni_n), "unigram and model must score the same positions"

    def ratio(m, u, n):  # unigram ppl / model ppl over the resampled windows
        return float(np.exp((u.sum() - m.sum()) / n.sum()))

    value = ratio(model_nll, uni_nll, model_n)
    spread = bootstrap_ci(ratio, model_nll, uni_nll, model_n, seed=ctx.seed)
    uni_ppl = float(np.exp(uni_nll.sum() / uni_n.sum()))
    model_ci = window_ppl_ci(model_nll, model_n, ctx.seed)
    uni_ci = window_ppl_ci(uni_nll, uni_n, ctx.seed)

    shuffled = shuffle_within_windows(test, seq_len, ctx.seed)
    ppl_shuf = perplexity(
        model, tok, ids=shuffled, seq_len=seq_len, max_tokens=None, progress=ctx.progress
    )
    shuf_ci = window_ppl_ci(
        np.array(ppl_shuf.window_nll), np.array(ppl_shuf.window_tokens), ctx.seed
    )
    shuf_label = f"{label} on shuffled-token text"
    uni_label = "unigram, add-one (train split counts)"
    checks = [
        power.control(
            shuf_label,
            ppl_shuf.ppl,
            label,
            ppl.ppl,
            spread=shuf_ci,
            null_spread=model_ci,
            higher_is_better=True,
            metric="perplexity",
        ),
        power.floor(
            {label: ppl.ppl},
            uni_label,
            uni_ppl,
            spreads={label: model_ci},
            floor_spread=uni_ci,
            higher_is_better=False,
            metric="perplexity",
        ),
    ]

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    bins = np.linspace(0, np.log10(max(np.exp(uni_nll / uni_n).max(), 10)) * 1.05, 40)
    ax.hist(np.log10(np.exp(model_nll / model_n)), bins=bins, alpha=0.7, label=f"{label}")
    ax.hist(np.log10(np.exp(uni_nll / uni_n)), bins=bins, alpha=0.7, label="unigram (train)")
    ax.set_xlabel(f"log10 perplexity of a {seq_len}-token window")
    ax.set_ylabel("windows")
    ax.set_title("Wikipedia test split: per-window perplexity")
    ax.legend()
    fig_path = save_figure(fig, ctx.out_dir / "window_ppl.png")

    rows = [
        {
            "system": label,
            "dtype": str(dtype).removeprefix("torch."),
            "perplexity": round(ppl.ppl, 3),
            "perplexity 95% CI": [round(x, 3) for x in model_ci],
            "tokens scored": ppl.n_tokens,
        },
        {
            "system": uni_label,
            "dtype": "float64",
            "perplexity": round(uni_ppl, 3),
            "perplexity 95% CI": [round(x, 3) for x in uni_ci],
            "tokens scored": int(uni_n.sum()),
        },
        {
            "system": shuf_label,
            "dtype": str(dtype).removeprefix("torch."),
            "perplexity": round(ppl_shuf.ppl, 3),
            "perplexity 95% CI": [round(x, 3) for x in shuf_ci],
            "tokens scored": ppl_shuf.n_tokens,
        },
    ]
    notes = [
        "A health check of the frame, not a paper claim.",
        f"{ppl.n_tokens} test tokens in non-overlapping {seq_len}-token windows; the unigram is "
        f"fitted on {train.numel()} train tokens of the same tokenizer and scored on the same positions.",
        "Spread: 95% percentile bootstrap over windows (2,000 resamples).",
        "Positive control: the same test tokens shuffled within each window (word order "
        "destroyed); floor: the unigram. Both compared on perplexity with window-bootstrap CIs.",
        "The packaged weights are the Q4_1 GGUF dequantized, not the original bf16 checkpoint.",
    ]
    return Result(
        rows=rows,
        headline=Measure("unigram ppl / model ppl", value, "x", spread, higher_is_better=True),
        target=TARGET,
        notes=notes,
        figures=[fig_path],
        power=checks,
    )
