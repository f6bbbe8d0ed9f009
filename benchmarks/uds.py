"""UDS per-step costs beside a full-batch SFT step, and the nuclear norm's Gram route vs svdvals.

Run: ``.venv/bin/python benchmarks/uds.py [--model smollm2|PATH] [--b 4] [--k 1] [--seq 128]``
on an idle machine (GPU: ``--device cuda --b 8 --seq 512``). Prints markdown rows for
benchmarks/RESULTS.md and writes ``benchmarks/uds_step.png`` (``--skip-train``: only the
selection math and the scoring forward, no figure).

The selection math is timed twice in one process, alternating: the library's batched path
(``UDSSelector.terms_from_logits``: the scored rows of all candidates gathered chunk by chunk
into one padded, masked block; float32 Gram, FJLT in the logits' dtype, time side first) and
``old_terms`` below, the per-candidate loop the selector ran before issue 36 (float64
vocabulary chunks for the Gram, ``L C_v`` first), kept here as the reference.

Targets (issue 10): selection math <= 10% of the scoring forward; Gram >= 5x faster than
``torch.linalg.svdvals`` at N=128, V=49152; a UDS step at 25% / a full step <= 0.7.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from icml26.uds.scores import nuclear_norm  # noqa: E402
from icml26.uds.selectors import UDSSelector  # noqa: E402

CLOCK = time.perf_counter  # --cpu-time switches to time.process_time (robust on a shared box)


def timeit(fn, repeats: int) -> float:
    fn()  # warm-up (oneDNN / allocator)
    out = []
    for _ in range(repeats):
        t0 = CLOCK()
        fn()
        out.append(CLOCK() - t0)
    return statistics.median(out)


def paired(fns: dict, repeats: int) -> dict:
    """Median time of each function, run in alternation (a load change hits all alike)."""
    for fn in fns.values():
        fn()  # warm-up
    out = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = CLOCK()
            fn()
            out[name].append(CLOCK() - t0)
    return {name: statistics.median(ts) for name, ts in out.items()}


def old_terms(logits, mask, proj, fifo, chunk=8192):
    """The UDS selector's math before issue 36, per candidate: float64 copies of every vocabulary
    chunk for the Gram, FJLT as ``C_t^T (L C_v)`` in float32. (intra (B,), inter (B,), emb)."""
    cv, ct = proj.cos_matrices(torch.float32, logits.device)
    intra, emb = [], []
    for i in range(logits.shape[0]):
        lg = logits[i, torch.nonzero(mask[i]).squeeze(1)]  # (n_i, V)
        n, v = lg.shape
        g = lg.new_zeros((n, n), dtype=torch.float64)
        right = lg.new_zeros((n, cv.shape[1]), dtype=torch.float32)
        for a in range(0, v, chunk):
            part = lg[:, a : a + chunk].to(torch.float64)
            g += part @ part.T
            right += lg[:, a : a + chunk].to(torch.float32) @ cv[a : a + chunk]
        intra.append(torch.linalg.eigvalsh(g).clamp_min(0).sqrt().sum().cpu())
        emb.append((ct[:n].T @ right).flatten())
    e = torch.stack(emb)
    return torch.stack(intra), fifo.mean_distance(e).cpu(), e


def sync(device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--b", type=int, default=4)
    ap.add_argument("--k", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    ap.add_argument("--cpu-time", action="store_true", help="time with process_time, not wall")
    ap.add_argument("--skip-train", action="store_true", help="no training-step rows, no figure")
    args = ap.parse_args()
    global CLOCK
    if args.cpu_time:
        CLOCK = time.process_time
    if args.threads:
        torch.set_num_threads(args.threads)
    clock = "CPU s" if args.cpu_time else "wall s"
    dev = args.device
    r = args.repeats

    # 1. nuclear norm: Gram route (fp32 chunk products, float64 sums) vs svdvals on (N, V) fp32
    g = torch.Generator().manual_seed(0)
    x = torch.randn(128, 49152, generator=g).to(dev)
    t_gram = timeit(lambda: (nuclear_norm(x), sync(dev)), r)
    t_svd = timeit(lambda: (torch.linalg.svdvals(x).sum(), sync(dev)), r)
    err = abs(float(nuclear_norm(x)) - float(torch.linalg.svdvals(x.double()).sum())) / float(
        nuclear_norm(x)
    )
    print(
        f"| UDS nuclear norm, N=128 V=49152 | Gram {t_gram * 1e3:.0f} ms | svdvals {t_svd * 1e3:.0f} ms | {t_svd / t_gram:.1f}x faster | rel. diff {err:.1e}, {torch.get_num_threads()} threads, {dev} |"
    )

    # 2. selection math vs the scoring forward with a real LM (old per-candidate path vs batched)
    from icml26.core.lm import load_lm
    from icml26.core.torchutil import parse_dtype

    model, tok = load_lm(
        None if args.model == "smollm2" else args.model, dtype=parse_dtype(args.dtype), device=dev
    )
    model.eval()
    vocab = model.get_output_embeddings().weight.shape[0]
    ids = torch.randint(0, vocab, (args.b, args.seq), generator=g).to(dev)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
    sel = UDSSelector(max_len=args.seq, seed=0)
    dim = sel.r_time * sel.r_vocab
    fifo = sel.fifo
    fifo.push(torch.randn(1024, dim, generator=g).to(dev))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)

    def fwd():
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=batch["attention_mask"]).logits

    logits = fwd()
    mask = torch.zeros(ids.shape, dtype=torch.bool, device=dev)
    mask[:, :-1] = True  # every row that predicts a label (all tokens labelled)

    def new_math():
        intra, emb, _ = sel.terms_from_logits(logits, mask)
        d = fifo.mean_distance(emb)
        sync(dev)
        return intra, d.cpu(), emb

    new_math()  # builds the projector (and its cosine matrices in the logits' dtype)

    def old_math():
        out = old_terms(logits, mask, sel.projector, fifo)
        sync(dev)
        return out

    (i_new, d_new, e_new), (i_old, d_old, e_old) = new_math(), old_math()
    agree = (
        float(((i_new - i_old).abs() / i_old).max()),
        float(((e_new.double() - e_old.double()).norm(dim=-1) / e_old.double().norm(dim=-1)).max()),
        float(((d_new - d_old).abs() / d_old).max()),
    )

    def train(n):
        def step():
            model.train()
            out = model(
                input_ids=ids[:n], attention_mask=batch["attention_mask"][:n], labels=ids[:n]
            )
            opt.zero_grad()
            out.loss.backward()
            opt.step()
            sync(dev)

        return step

    times = paired({"fwd": lambda: (fwd(), sync(dev)), "old": old_math, "new": new_math}, max(r, 5))
    t_fwd, t_old, t_math = times["fwd"], times["old"], times["new"]
    label = f"{args.model} b={args.b} seq={args.seq} {args.dtype} {dev}, {torch.get_num_threads()} threads, {clock}"
    print(
        f"| UDS selection math / scoring forward, before issue 36 (per candidate, fp64 Gram chunks) | {t_old * 1e3:.0f} ms | forward {t_fwd * 1e3:.0f} ms | {t_old / t_fwd:.3f} | {label} |"
    )
    print(
        f"| UDS selection math / scoring forward, batched (fp32 Gram, FJLT in {args.dtype}, time side first) | {t_math * 1e3:.0f} ms | forward {t_fwd * 1e3:.0f} ms | {t_math / t_fwd:.3f} | {label}; {t_old / t_math:.1f}x faster than before; max rel. diff from before: intra {agree[0]:.1e}, embedding {agree[1]:.1e}, distance {agree[2]:.1e} |"
    )
    if args.skip_train:
        return
    t_k = timeit(train(args.k), r)
    t_b = timeit(train(args.b), r)
    t_uds = t_fwd + t_math + t_k
    label = f"{args.model} b={args.b} K={args.k} seq={args.seq} {args.dtype} {dev}, {torch.get_num_threads()} threads, {clock}"
    print(
        f"| UDS step (score b, train K) / full step (train b) | {t_uds:.2f} s | {t_b:.2f} s | {t_uds / t_b:.2f} | {label}; FLOP estimate 0.58 |"
    )

    from icml26.core.plots import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.barh(["full step", "UDS step"], [0, t_fwd], color="C0", label="scoring forward (no grad)")
    ax.barh(
        ["full step", "UDS step"],
        [0, t_math],
        left=[0, t_fwd],
        color="C1",
        label="nuclear norm + FJLT + distances",
    )
    ax.barh(
        ["full step", "UDS step"],
        [t_b, t_k],
        left=[0, t_fwd + t_math],
        color="C2",
        label="training forward + backward + AdamW",
    )
    ax.set_xlabel("seconds per optimizer step (median)")
    ax.set_title(label, fontsize=9)
    ax.legend(fontsize=8)
    print("figure:", save_figure(fig, Path(__file__).with_name("uds_step.png")))


if __name__ == "__main__":
    main()
