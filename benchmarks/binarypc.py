"""One decode attention step: dense SDPA vs BinaryPC (score codes + top-k + gather + attend).

Synthetic KV with SmolLM2's shape (9 query / 3 KV heads, d 64) by default; ``--gpu-shape`` uses
B 8, 32/8 heads, d 128 bf16 on CUDA. Prints a JSON line per context and writes a PNG.

    python benchmarks/binarypc.py --contexts 8192 32768 [--device cuda --gpu-shape]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from icml26.binarypc.codes import binary_pcs, hash_keys
from icml26.binarypc.select import budget, code_scores, select_tokens, sparse_attention


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
    g = torch.Generator().manual_seed(0)
    K = torch.randn(B, Hkv, L, D, generator=g).to(device, dtype)
    Vv = torch.randn(B, Hkv, L, D, generator=g).to(device, dtype)
    q = torch.randn(B, Hq, D, generator=g).to(device, dtype)
    t0 = time.perf_counter()
    dirs = binary_pcs(K[:, :, : min(L, 4096)].float(), 64, 4, generator=g.manual_seed(1))
    codes = hash_keys(K.float(), dirs)
    prep = time.perf_counter() - t0
    k = budget(L)
    sc = D**-0.5

    def dense():
        return torch.nn.functional.scaled_dot_product_attention(
            q[:, :, None], K, Vv, scale=sc, enable_gqa=True
        )

    def sparse():
        s = code_scores(q, codes, dirs)
        idx = select_tokens(s, k, L)
        return sparse_attention(q, K, Vv, idx, sc)

    td, ts = _time(dense, reps, device), _time(sparse, reps, device)
    return {
        "context": L,
        "budget": k,
        "dense_ms": 1e3 * td,
        "binarypc_ms": 1e3 * ts,
        "speedup": td / ts,
        "prefill_codes_s": prep,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--contexts", type=int, nargs="+", default=[8192, 32768])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--gpu-shape", action="store_true")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--png", default="benchmarks/binarypc.png")
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


if __name__ == "__main__":
    main()
