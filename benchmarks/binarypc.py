"""BinaryPC decode cost: one attention step and end-to-end SmolLM2 decode, vs dense.

1. One decode attention step on synthetic KV with SmolLM2's shape (9 query / 3 KV heads, d 64,
   fp32) at 8k/32k/128k: dense SDPA (``enable_gqa``, no repeat_kv copy) vs the library's sparse
   path (``patch.sparse_decode``: LUT code scores + error set + top-k + gather + exact attention)
   at the 2% budget; plus the prefill cost of the codes (directions + hashing).
   ``--gpu-shape`` uses B 8, 32/8 heads, d 128 bf16 (for CUDA).
2. ``--e2e``: end-to-end greedy decode of the packaged SmolLM2 after an 8k dense prefill, dense vs
   ``apply_binarypc`` in the same process (one shared prefill; ``prime`` builds a BinaryPCCache with
   the codes over it).

Prints one JSON line per measurement (with the load average) and writes a PNG.

    python benchmarks/binarypc.py --contexts 8192 32768 131072 --e2e
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import torch

from icml26.binarypc.select import budget


def _time(fn, reps: int, device: str) -> float:
    fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return (time.perf_counter() - t) / reps


def bench(L: int, B: int, Hq: int, Hkv: int, D: int, dtype, device: str, reps: int) -> dict:
    from icml26.binarypc.methods import BinaryPCConfig, make_method
    from icml26.binarypc.patch import sparse_decode

    g = torch.Generator().manual_seed(0)
    K = torch.randn(B, Hkv, L, D, generator=g).to(device, dtype)
    Vv = torch.randn(B, Hkv, L, D, generator=g).to(device, dtype)
    q = torch.randn(B, Hq, D, generator=g).to(device, dtype)
    cfg = BinaryPCConfig()
    m = make_method(cfg)
    t0 = time.perf_counter()
    meta = m.prepare(K, g.manual_seed(1))  # directions over all L keys + codes + error
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    prep = time.perf_counter() - t0
    k = budget(L, cfg.mask_out, cfg.min_remain)
    sc = D**-0.5

    def dense():
        return torch.nn.functional.scaled_dot_product_attention(
            q[:, :, None], K, Vv, scale=sc, enable_gqa=True
        )

    def sparse():
        return sparse_decode(m, meta, L, q, K, Vv, sc, k)[0]

    def score_only():
        return m.score(q, meta, k)

    td, ts = _time(dense, reps, device), _time(sparse, reps, device)
    tsc = _time(score_only, reps, device)
    return {
        "bench": "attention step",
        "context": L,
        "batch": B,
        "heads": f"{Hq}/{Hkv}",
        "head_dim": D,
        "dtype": str(dtype).replace("torch.", ""),
        "budget": k,
        "dense_ms": round(1e3 * td, 3),
        "binarypc_ms": round(1e3 * ts, 3),
        "of which scoring_ms": round(1e3 * tsc, 3),
        "speedup": round(td / ts, 3),
        "prefill_codes_s": round(prep, 3),
        "load_avg": os.getloadavg()[0],
    }


@torch.no_grad()
def bench_e2e(context: int, steps: int, reps: int) -> list[dict]:
    """Greedy decode of ``steps`` tokens after a dense ``context``-token prefill (SmolLM2 fp32),
    dense vs BinaryPC (2%), best of ``reps``; the prefill is shared and cropped back."""
    from icml26.binarypc import BinaryPCConfig, apply_binarypc, remove_binarypc
    from icml26.binarypc.patch import prime
    from icml26.core.lm import load_lm
    from icml26.core.text import token_ids

    model, tok = load_lm(None, dtype=torch.float32)
    ids = token_ids(tok, "test", max_tokens=context).reshape(1, -1)
    t0 = time.perf_counter()
    out = model(input_ids=ids, use_cache=True)
    prefill = time.perf_counter() - t0
    past, first = out.cache, out.logits[0, -1].argmax().reshape(1, 1)

    def decode(cache):
        nxt = first
        for _ in range(steps):
            o = model(input_ids=nxt, cache=cache, use_cache=True)
            nxt = o.logits[0, -1].argmax().reshape(1, 1)
        cache.crop(-steps)

    res = {}
    for label in ("dense", "binarypc"):
        cache = past
        if label == "binarypc":
            apply_binarypc(model, BinaryPCConfig())
            t0 = time.perf_counter()
            cache = prime(model, past)  # a BinaryPCCache sharing the prefill's K/V
            codes_s = time.perf_counter() - t0
        best = math.inf
        for _ in range(reps):
            t0 = time.perf_counter()
            decode(cache)
            best = min(best, time.perf_counter() - t0)
        res[label] = best
        if label == "binarypc":
            remove_binarypc(model)
    return [
        {
            "bench": "end-to-end decode",
            "model": "SmolLM2-135M fp32",
            "context": context,
            "steps": steps,
            "dense_tok_s": round(steps / res["dense"], 2),
            "binarypc_tok_s": round(steps / res["binarypc"], 2),
            "speedup": round(res["dense"] / res["binarypc"], 3),
            "prefill_s": round(prefill, 2),
            "codes_s (28 layers)": round(codes_s, 2),
            "load_avg": os.getloadavg()[0],
        }
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--contexts", type=int, nargs="+", default=[8192, 32768, 131072])
    ap.add_argument("--e2e", action="store_true", help="also end-to-end SmolLM2 decode")
    ap.add_argument("--e2e-context", type=int, default=8192)
    ap.add_argument("--e2e-steps", type=int, default=16)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--gpu-shape", action="store_true")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--png", default="docs/figures/binarypc_bench.png")
    a = ap.parse_args()
    shape = (
        dict(B=8, Hq=32, Hkv=8, D=128, dtype=torch.bfloat16)
        if a.gpu_shape
        else dict(B=1, Hq=9, Hkv=3, D=64, dtype=torch.float32)
    )
    rows = []
    for L in a.contexts:
        r = bench(L, device=a.device, reps=a.reps, **shape)
        rows.append(r)
        print(json.dumps(r))
    from icml26.core.plots import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot([r["context"] for r in rows], [r["dense_ms"] for r in rows], "o-", label="dense SDPA")
    ax.plot(
        [r["context"] for r in rows], [r["binarypc_ms"] for r in rows], "o-", label="BinaryPC 2%"
    )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context (tokens)")
    ax.set_ylabel("ms per decode attention step")
    ax.legend()
    save_figure(fig, a.png)
    if a.e2e:
        for r in bench_e2e(a.e2e_context, a.e2e_steps, max(1, a.reps // 2)):
            print(json.dumps(r))


if __name__ == "__main__":
    main()
