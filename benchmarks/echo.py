"""ECHO on CPU: the forward-time knee, packed vs per-request verification, wall-clock per policy.

Run: ``.venv/bin/python benchmarks/echo.py [--model PATH] [--dtype bf16] [--prompts 4] [--tokens 32]``;
the zoo pair: ``--pair qwen`` (target Qwen2.5-Coder-1.5B-Instruct, draft Qwen2.5-Coder-0.5B-Instruct;
or ``--model A --draft B``), ``--batch-sizes 1,4``
(idle machine; ``--device cuda`` on a GPU). Three measurements, side by side in one process:

1. forward seconds vs new tokens (1..128) on a 256-token cache: the verification knee of this
   device (a CPU is compute-bound almost at once; a GPU stays flat up to a few hundred tokens);
2. one packed super-tree verification of B=8 trees vs a loop of 8 single-tree verifications;
3. wall-clock tokens/s of live speculative decoding per policy vs AR at B=1 and B=4 (self-draft),
   with the outputs checked token for token against AR.

Prints markdown rows for benchmarks/RESULTS.md; saves a PNG to ``--plot``
(default results/benchmarks/echo_cpu.png; '' for none).

GPU check (``--tree-knee --device cuda``): a random-weight Llama-3-8B-shaped model (4 decoder
layers by default, bf16) timed on B x K tree-masked batches (B <= 256, K <= 64, 1,024 cached
tokens per row), with T_ar, K_max and gamma fitted per B; ``--knee-shape tiny --device cpu``
runs the same code path as a smoke test.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from icml26.core.lm import load_lm  # noqa: E402
from icml26.core.torchutil import parse_dtype  # noqa: E402
from icml26.echo.claim import cpu_knee  # noqa: E402
from icml26.echo.cost import fit_knee  # noqa: E402
from icml26.echo.decode import SpeculativeDecoder  # noqa: E402
from icml26.echo.experiment import chat_ids  # noqa: E402
from icml26.echo.model import TreeLM  # noqa: E402
from icml26.echo.policies import AR, AdaptiveChain, DenseDynamic, Echo, StaticTree  # noqa: E402
from icml26.echo.prompts import echo_prompts  # noqa: E402
from icml26.echo.tree import DraftTree  # noqa: E402
from icml26.echo.verify import verify_batch  # noqa: E402


def packed_vs_loop(lm: TreeLM, b: int = 8, reps: int = 3) -> tuple[float, float]:
    g = torch.Generator().manual_seed(0)
    caches, trees = [], []
    for i in range(b):
        ids = torch.randint(0, lm.vocab, (96 + 16 * i,), generator=g)
        caches.append(lm.prefill(ids)[1])
        paths = {}
        for j in range(8):  # a 2-wide, 4-deep tree (8 draft nodes)
            paths[(j % 2 + 1,) + tuple(range(10, 10 + j // 2))] = -float(j)
        trees.append(DraftTree.from_paths(5, {p[:k]: -0.1 * k for p in paths for k in range(1, len(p) + 1)}))
    verify_batch(lm, trees, caches)
    t_packed, t_loop = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        verify_batch(lm, trees, caches)
        t1 = time.perf_counter()
        for tr, c in zip(trees, caches, strict=True):
            verify_batch(lm, [tr], [c])
        t2 = time.perf_counter()
        t_packed.append(t1 - t0)
        t_loop.append(t2 - t1)
    return float(np.median(t_packed)), float(np.median(t_loop))


SHAPES = {  # hidden, heads, kv heads, ffn, vocab
    "8b": (4096, 32, 8, 14336, 128256),  # Llama-3-8B
    "tiny": (128, 4, 2, 384, 1024),      # a CPU smoke test of the same code path
}


@torch.no_grad()
def tree_batch_knee(shape: str = "8b", layers: int = 4, device: str = "cuda", dtype: str = "bf16",
                    batch_sizes=(1, 8, 32, 64, 128, 256), per_request=(1, 2, 4, 8, 16, 32, 64),
                    context: int = 1024, reps: int = 5, max_tokens: int = 16384) -> list[dict]:
    """The GPU check: a random-weight Llama of ``shape`` (``layers`` decoder layers) in ``dtype``;
    one forward over ``B`` rows of ``K`` tree-masked new tokens (a 2-wide tree: each token sees the
    prefix, its ancestors and itself) on ``context`` cached tokens per row; median seconds, and
    ``fit_knee`` on (B*K, seconds) per B. Totals above ``max_tokens`` are skipped (memory).
    Times are for ``layers`` layers plus embedding and head: K_max and gamma carry to the full
    depth to first order; T_ar scales with the layer count."""
    from transformers import LlamaConfig, LlamaForCausalLM

    hidden, heads, kv, ffn, vocab = SHAPES[shape]
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=context + 128)
    dev = torch.device(device)
    torch.manual_seed(0)
    with dev:
        model = LlamaForCausalLM(cfg).to(parse_dtype(dtype)).eval()
    lm = TreeLM(model)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    out = []
    for b in batch_sizes:
        ks, ts = [], []
        g = torch.Generator(device="cpu").manual_seed(b)
        cache = [(torch.randn(b, kv, context, hidden // heads, generator=g).to(dev, lm.dtype),
                  torch.randn(b, kv, context, hidden // heads, generator=g).to(dev, lm.dtype)) for _ in range(layers)]
        for k in per_request:
            if b * k > max_tokens:
                continue
            par = [max(j - 2, -1) for j in range(k)]  # 2-wide binary-ish tree: parent of j is j - 2
            anc = torch.eye(k, dtype=torch.bool)
            for j in range(k):
                if par[j] >= 0:
                    anc[j] |= anc[par[j]]
            mask = torch.cat([torch.ones(k, context, dtype=torch.bool), anc], 1).expand(b, k, context + k)
            depth = anc.sum(1) - 1
            toks = torch.randint(0, vocab, (b, k), generator=g)
            pos = (context + depth).expand(b, k)
            lm.forward(toks, pos, mask, cache)
            sync()
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                lm.forward(toks, pos, mask, cache)
                sync()
                times.append(time.perf_counter() - t0)
            ks.append(b * k)
            ts.append(float(np.median(times)))
        fit = fit_knee(ks, ts) if len(ks) >= 3 else None
        out.append({"B": b, "K per request": [k // b for k in ks], "seconds": ts,
                    "fit": None if fit is None else vars(fit)})
        del cache
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--exit-layer", type=int, default=None)
    ap.add_argument("--draft", default=None, help="a separate draft model (same tokenizer)")
    ap.add_argument("--pair", default=None, choices=["qwen"], help="the zoo's Qwen2.5-Coder 1.5B/0.5B pair")
    ap.add_argument("--batch-sizes", default="1,4")
    ap.add_argument("--knee-widths", default="1,2,4,8,16,32,64,128")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--plot", default="results/benchmarks/echo_cpu.png")
    ap.add_argument("--tree-knee", action="store_true",
                    help="only the GPU check: random-weight 8B-shaped forwards on B x K tree-masked batches")
    ap.add_argument("--knee-shape", default="8b", choices=sorted(SHAPES))
    ap.add_argument("--knee-layers", type=int, default=4)
    ap.add_argument("--knee-batch-sizes", default="1,8,32,64,128,256")
    a = ap.parse_args()
    if a.tree_knee:
        import json

        rows = tree_batch_knee(a.knee_shape, a.knee_layers, a.device, a.dtype,
                               tuple(int(x) for x in a.knee_batch_sizes.split(",")))
        print("| B | K per request | ms | fit T_ar (ms) | K_max (total tokens) | gamma |\n|---|---|---|---|---|---|")
        for r in rows:
            f = r["fit"] or {}
            print(f"| {r['B']} | {r['K per request']} | {[round(1e3 * t, 2) for t in r['seconds']]} | "
                  f"{1e3 * f.get('t_ar', float('nan')):.2f} | {f.get('k_max', float('nan')):.0f} | "
                  f"{f.get('gamma', float('nan')):.4f} |")
        print(json.dumps(rows))
        return
    if a.pair == "qwen":
        a.model, a.draft = a.model or "qwen2.5-coder-1.5b-instruct", a.draft or "qwen2.5-coder-0.5b-instruct"
    model, tok = load_lm(a.model, dtype=parse_dtype(a.dtype), device=a.device)
    lm = TreeLM(model)
    if a.draft:
        from icml26.echo.hf import check_tokenizers

        dmodel, dtok = load_lm(a.draft, dtype=parse_dtype(a.dtype), device=a.device)
        check_tokenizers(tok, dtok)
        ell = TreeLM(dmodel)
    else:
        ell = a.exit_layer or lm.n_layers - 1
    widths, secs = cpu_knee(lm, tuple(int(x) for x in a.knee_widths.split(",")))
    knee = fit_knee(widths, secs)
    print("| new tokens | forward ms |\n|---|---|")
    for w, s in zip(widths, secs, strict=True):
        print(f"| {w} | {1e3 * s:.1f} |")
    print(f"knee fit: T_ar={1e3 * knee.t_ar:.1f} ms, K_max={knee.k_max:.1f}, gamma={knee.gamma:.4f}\n")
    tp, tl = packed_vs_loop(lm)
    print(f"| verification of 8 trees x 9 tokens | packed {1e3 * tp:.0f} ms | per-request loop {1e3 * tl:.0f} ms "
          f"| loop / packed {tl / tp:.2f}x |\n")
    ids = [chat_ids(tok, t) for _, t in echo_prompts(a.prompts, seed=3)]
    pols = [AR(), StaticTree(depth=5, topk=4, total=8, name="StaticTree-SGLang"), AdaptiveChain(depth=4),
            DenseDynamic(tau=0.3, topk=4), Echo(topk=4)]
    if not a.draft:
        pols.insert(1, StaticTree())
    bss = tuple(int(x) for x in a.batch_sizes.split(","))
    print("| policy | B | tokens/s (wall) | vs AR | MAT | verified/accepted | identical to AR |\n|---|---|---|---|---|---|---|")
    res = {}
    for b in bss:
        ref = None
        for pol in pols:
            dec = SpeculativeDecoder(lm, ell, pol, k_max=max(b, 16 * b), bucket=1 if isinstance(pol, AR) else 8)
            t0 = time.perf_counter()
            out = dec.generate(ids, a.tokens, batch_size=b, eos_token_id=tok.eos_token_id)
            wall = time.perf_counter() - t0
            tps = sum(map(len, out.tokens)) / wall
            ref = out.tokens if ref is None else ref
            res[pol.name, b] = tps
            print(f"| {pol.name} | {b} | {tps:.1f} | {tps / res['AR', b]:.2f}x | {out.mean_accepted:.2f} | "
                  f"{out.verified_per_accepted:.2f} | {sum(x == y for x, y in zip(out.tokens, ref, strict=True))}/{len(ids)} |")
    if a.plot:
        from icml26.core.plots import pyplot, save_figure

        plt = pyplot()
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
        axes[0].plot(widths, 1e3 * np.array(secs), "o-", label="measured")
        axes[0].plot(widths, 1e3 * knee.time(widths), "--", label=f"knee fit K_max={knee.k_max:.0f}")
        axes[0].set_xscale("log", base=2)
        axes[0].set_xlabel("new tokens in one forward")
        axes[0].set_ylabel("ms")
        axes[0].legend()
        names = [p.name for p in pols]
        x = np.arange(len(names))
        for j, b in enumerate(bss):
            axes[1].bar(x + 0.4 * j, [res[n, b] / res["AR", b] for n in names], 0.4, label=f"B={b}")
        axes[1].set_xticks(x + 0.2, names, rotation=20, fontsize=7)
        axes[1].axhline(1, color="k", lw=0.8)
        axes[1].set_ylabel("wall-clock tokens/s vs AR (CPU)")
        axes[1].legend()
        Path(a.plot).parent.mkdir(parents=True, exist_ok=True)
        save_figure(fig, Path(a.plot))
        print(f"\nfigure: {a.plot}")


if __name__ == "__main__":
    main()
