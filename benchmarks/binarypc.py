"""BinaryPC decode cost: one attention step and end-to-end SmolLM2 decode, vs dense.

1. One decode attention step on synthetic KV with SmolLM2's shape (9 query / 3 KV heads, d 64,
   fp32) at 8k/32k/128k: dense SDPA (``enable_gqa``, no repeat_kv copy) vs the library's sparse
   path (``patch.sparse_decode``: code scores + error set + top-k + gather + exact attention) at
   the 2% budget, through the compiled kernel (``cpp``) and the tensor path (``torch``), with the
   time split into scoring, selection and gather+attend; plus the prefill cost of the codes.
   ``--gpu-shape`` uses B 8, 32/8 heads, d 128 bf16 (for CUDA).
2. ``--e2e``: end-to-end greedy decode of the packaged SmolLM2 after an 8k dense prefill, dense vs
   ``apply_binarypc`` in the same process (one shared prefill; ``prime`` builds a BinaryPCCache with
   the codes over it). ``--e2e-synthetic`` replaces the prefill by a random K/V cache of
   ``--e2e-context`` tokens (beyond SmolLM2's 8k window; decode cost only).

Prints one JSON line per measurement (with the load average) and writes a PNG.

    ICML26_THREADS=1 python benchmarks/binarypc.py --contexts 8192 32768 131072
    ICML26_THREADS=1 python benchmarks/binarypc.py --no-steps --e2e-synthetic --e2e-context 32768
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import torch

from icml26.binarypc.select import budget


def _time(fn, reps: int, device: str, rounds: int = 5) -> float:
    """Seconds per call: the best of ``rounds`` means over ``reps`` calls (after one warm-up), so
    that load from other processes inflates the figure as little as possible."""
    fn()
    best = math.inf
    for _ in range(rounds):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t) / reps)
    return best


def _sparse_times(be, meta, q, K, Vv, sc, k, reps, device):
    """ms of one BinaryPC step through backend ``be`` (total, scoring, selection, gather+attend)
    and its selection."""
    from icml26.binarypc.methods import BinaryPCConfig, make_method
    from icml26.binarypc.patch import sparse_decode
    from icml26.binarypc.select import select_tokens, sparse_attention

    L = K.shape[2]
    m = make_method(BinaryPCConfig(backend=be))
    mt = dict(meta)
    s, forced = m.score(q, mt, k)
    idx = select_tokens(s, k, L, forced=forced, backend=be)
    fns = {
        "total": lambda: sparse_decode(m, mt, L, q, K, Vv, sc, k)[0],
        "score": lambda: m.score(q, mt, k),
        "select": lambda: select_tokens(s, k, L, forced=forced, backend=be),
        "gather+attend": lambda: sparse_attention(q, K, Vv, idx, sc),
    }
    return {n: round(1e3 * _time(f, reps, device), 3) for n, f in fns.items()}, idx


def bench(L: int, B: int, Hq: int, Hkv: int, D: int, dtype, device: str, reps: int) -> dict:
    """One decode attention step at context ``L``: dense SDPA vs BinaryPC through the compiled
    kernel ("cpp") and through the tensor path ("torch"), same inputs, same process; the two
    sparse paths are checked to select the same tokens."""
    from icml26.binarypc import kernel
    from icml26.binarypc.methods import BinaryPCConfig, make_method

    g = torch.Generator().manual_seed(0)
    K = torch.randn(B, Hkv, L, D, generator=g).to(device, dtype)
    Vv = torch.randn(B, Hkv, L, D, generator=g).to(device, dtype)
    q = torch.randn(B, Hq, D, generator=g).to(device, dtype)
    t0 = time.perf_counter()
    meta = make_method(BinaryPCConfig()).prepare(K, g.manual_seed(1))  # directions + codes + err
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    prep = time.perf_counter() - t0
    k = budget(L, 0.98, 128)
    sc = D**-0.5

    def dense():
        return torch.nn.functional.scaled_dot_product_attention(
            q[:, :, None], K, Vv, scale=sc, enable_gqa=True
        )

    row = {
        "bench": "attention step",
        "context": L,
        "batch": B,
        "heads": f"{Hq}/{Hkv}",
        "head_dim": D,
        "dtype": str(dtype).replace("torch.", ""),
        "budget": k,
        "threads": torch.get_num_threads(),
        "dense_ms": round(1e3 * _time(dense, reps, device), 3),
    }
    backends = ["torch"] + (["cpp"] if device == "cpu" and kernel.available() else [])
    sel = {}
    for be in backends:
        times, sel[be] = _sparse_times(be, meta, q, K, Vv, sc, k, reps, device)
        row.update({(f"{be}_ms" if n == "total" else f"{be}: {n}_ms"): v for n, v in times.items()})
        row[f"speedup ({be})"] = round(row["dense_ms"] / row[f"{be}_ms"], 3)
    if "cpp" in sel:
        row["same selection (cpp vs torch)"] = bool(torch.equal(sel["cpp"], sel["torch"]))
    row["prefill_codes_s"] = round(prep, 3)
    row["load_avg"] = os.getloadavg()[0]
    return row


@torch.no_grad()
def bench_e2e(
    context: int, steps: int, reps: int, synthetic: bool = False, dtype=torch.float32
) -> list[dict]:
    """Greedy decode of ``steps`` tokens with a ``context``-token cache (packaged SmolLM2),
    dense vs BinaryPC (2%), best of ``reps``; the cache is shared and cropped back.

    Real: a dense prefill of Wikipedia test text (at most SmolLM2's 8,192 positions).
    ``synthetic``: random K/V of the right shape in every layer (no prefill, any length; decode
    cost does not depend on the values), with offline directions from the first 2,048 keys of
    each layer (``prime`` then only hashes the keys); positions past 8,192 are outside the
    model's trained window, which is irrelevant to timing and disclosed in the row."""
    from transformers.cache_utils import DynamicCache

    from icml26.binarypc import BinaryPCConfig, apply_binarypc, remove_binarypc
    from icml26.binarypc.codes import binary_pcs
    from icml26.binarypc.patch import prime
    from icml26.core.lm import load_lm
    from icml26.core.text import token_ids

    model, tok = load_lm(None, dtype=dtype)
    cfgm = model.config
    Hkv = cfgm.num_key_value_heads
    D = getattr(cfgm, "head_dim", None) or cfgm.hidden_size // cfgm.num_attention_heads
    n_layers = cfgm.num_hidden_layers
    directions = None
    t0 = time.perf_counter()
    if synthetic:
        g = torch.Generator().manual_seed(0)
        past = DynamicCache()
        dirs = []
        for li in range(n_layers):
            k = torch.randn(1, Hkv, context, D, generator=g).to(dtype)
            v = torch.randn(1, Hkv, context, D, generator=g).to(dtype)
            past.update(k, v, li)
            dirs.append(binary_pcs(k[0, :, :2048].float(), 64, 4, generator=g))
        directions = torch.stack(dirs)
        first = torch.tensor([[tok.eos_token_id or 0]])
    else:
        ids = token_ids(tok, "test", max_tokens=context).reshape(1, -1)
        out = model(input_ids=ids, use_cache=True)
        past, first = out.cache, out.logits[0, -1].argmax().reshape(1, 1)
    prefill = time.perf_counter() - t0

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
            apply_binarypc(model, BinaryPCConfig(), directions=directions)
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
            "model": f"SmolLM2-135M {str(dtype).replace('torch.', '')}",
            "cache": "synthetic K/V, offline directions" if synthetic else "real dense prefill",
            "context": context,
            "steps": steps,
            "threads": torch.get_num_threads(),
            "dense_tok_s": round(steps / res["dense"], 2),
            "binarypc_tok_s": round(steps / res["binarypc"], 2),
            "speedup": round(res["dense"] / res["binarypc"], 3),
            "prefill_s": round(prefill, 2),
            f"codes_s ({n_layers - 2} layers)": round(codes_s, 2),
            "load_avg": os.getloadavg()[0],
        }
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--contexts", type=int, nargs="+", default=[8192, 32768, 131072])
    ap.add_argument("--e2e", action="store_true", help="also end-to-end SmolLM2 decode")
    ap.add_argument("--e2e-context", type=int, default=8192)
    ap.add_argument("--e2e-steps", type=int, default=16)
    ap.add_argument("--e2e-synthetic", action="store_true", help="random K/V cache, any length")
    ap.add_argument("--e2e-dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--no-steps", action="store_true", help="skip the attention-step rows")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--gpu-shape", action="store_true")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument(
        "--dtype", default="fp32", choices=["fp32", "bf16"], help="attention-step K/V/q"
    )
    ap.add_argument("--png", default="docs/figures/binarypc_bench.png")
    a = ap.parse_args()
    from icml26.core.claims import set_threads

    set_threads()  # $ICML26_THREADS (1 for the figures in RESULTS.md)
    shape = (
        dict(B=8, Hq=32, Hkv=8, D=128, dtype=torch.bfloat16)
        if a.gpu_shape
        else dict(
            B=1, Hq=9, Hkv=3, D=64, dtype=torch.bfloat16 if a.dtype == "bf16" else torch.float32
        )
    )
    rows = []
    for L in [] if a.no_steps else a.contexts:
        r = bench(L, device=a.device, reps=a.reps, **shape)
        rows.append(r)
        print(json.dumps(r))
    if rows:
        from icml26.core.plots import pyplot, save_figure

        plt = pyplot()
        fig, ax = plt.subplots(figsize=(5, 3.5))
        xs = [r["context"] for r in rows]
        ax.plot(xs, [r["dense_ms"] for r in rows], "o-", label="dense SDPA")
        for be, lab in (("cpp", "BinaryPC 2%, C++ kernel"), ("torch", "BinaryPC 2%, tensor ops")):
            if f"{be}_ms" in rows[0]:
                ax.plot(xs, [r[f"{be}_ms"] for r in rows], "o-", label=lab)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel("ms per decode attention step")
        ax.legend()
        save_figure(fig, a.png)
    if a.e2e or a.e2e_synthetic:
        dt = torch.bfloat16 if a.e2e_dtype == "bf16" else torch.float32
        for r in bench_e2e(a.e2e_context, a.e2e_steps, max(1, a.reps // 2), a.e2e_synthetic, dt):
            print(json.dumps(r))


if __name__ == "__main__":
    main()
