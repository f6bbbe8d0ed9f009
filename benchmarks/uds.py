"""UDS per-step costs beside a full-batch SFT step, and the nuclear norm's Gram route vs svdvals.

Run: ``.venv/bin/python benchmarks/uds.py [--model smollm2|PATH] [--b 4] [--k 1] [--seq 128]``
on an idle machine (GPU: ``--device cuda --b 8 --seq 512``). Prints markdown rows for
benchmarks/RESULTS.md and writes ``benchmarks/uds_step.png``.

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

from icml26.uds.scores import EmbeddingFIFO, FJLTProjector, nuclear_norm  # noqa: E402

CLOCK = time.perf_counter  # --cpu-time switches to time.process_time (robust on a shared box)


def timeit(fn, repeats: int) -> float:
    fn()  # warm-up (oneDNN / allocator)
    out = []
    for _ in range(repeats):
        t0 = CLOCK()
        fn()
        out.append(CLOCK() - t0)
    return statistics.median(out)


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
    args = ap.parse_args()
    global CLOCK
    if args.cpu_time:
        CLOCK = time.process_time
    if args.threads:
        torch.set_num_threads(args.threads)
    clock = "CPU s" if args.cpu_time else "wall s"
    dev = args.device
    r = args.repeats

    # 1. nuclear norm: Gram route (float64 accumulation, chunked) vs svdvals on (N, V) fp32
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

    # 2. one training step with a real LM
    from icml26.core.lm import load_lm
    from icml26.core.torchutil import parse_dtype

    model, tok = load_lm(
        None if args.model == "smollm2" else args.model, dtype=parse_dtype(args.dtype), device=dev
    )
    vocab = model.get_output_embeddings().weight.shape[0]
    ids = torch.randint(0, vocab, (args.b, args.seq), generator=g).to(dev)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
    proj = FJLTProjector(vocab, args.seq, 8, 128, seed=0, device=dev)
    fifo = EmbeddingFIFO(1024)
    fifo.push(torch.randn(1024, proj.dim, generator=g).to(dev))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)

    def fwd():
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=batch["attention_mask"]).logits

    logits = fwd()

    def math_():
        s = nuclear_norm(logits[:, :-1])
        e = proj.project(logits[:, :-1])
        d = fifo.mean_distance(e)
        sync(dev)
        return s + d

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

    t_fwd = timeit(lambda: (fwd(), sync(dev)), r)
    t_math = timeit(math_, r)
    t_k = timeit(train(args.k), r)
    t_b = timeit(train(args.b), r)
    t_uds = t_fwd + t_math + t_k
    label = f"{args.model} b={args.b} K={args.k} seq={args.seq} {args.dtype} {dev}, {torch.get_num_threads()} threads, {clock}"
    print(
        f"| UDS selection math / scoring forward | {t_math * 1e3:.0f} ms | forward {t_fwd * 1e3:.0f} ms | {t_math / t_fwd:.2f} | {label} |"
    )
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
