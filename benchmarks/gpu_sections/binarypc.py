"""BinaryPC: selections on the device equal the CPU's; one decode attention step vs dense SDPA.

Checked (tiny input: batch 2, 8 query / 2 KV heads, head dim 32, 512 keys):

- directions (``binary_pcs``, float64, same seed) on the device close to the CPU's;
- 64-bit key codes (``hash_keys``, float64, the CPU's directions) bit-exact;
- int8 query projections (``project_query``) bit-exact in float64, and in float32 except where
  p / scale lies within 1e-4 of a rounding boundary; float32 code scores close;
- ``select_tokens`` on the CPU's float32 scores and error set: the same indices, bit-exact;
- the whole step (``prepare`` + ``sparse_decode``, online directions) on the device vs the CPU:
  bit-exact indices in float64; in float32 the same indices when the scores agree, else an
  overlap >= 0.8 (float32 noise may decide a direction sign: the overlap is recorded);
- independent references (so the CPU rehearsal tests something): scores against a brute-force
  ±1 sum in float64, the selection against a sorted brute force with the tie rule (later token
  wins), the sparse output against float64 softmax attention over the same tokens.

Timed (ms per decode attention step, median, CUDA events): dense ``scaled_dot_product_attention``
(``enable_gqa``; whichever kernel torch picks, flash where it applies) vs the library's sparse path
(``patch.sparse_decode``: code scores + error set + top-k + gather + exact attention) at the 2%
budget, on random K/V/q. Paper shapes: Llama-3-8B attention (32 query / 8 KV heads, head dim 128,
bf16), batch 8, contexts 32k and 128k. Memory at 128k: K+V 2 x 8·8·131072·128·2 B = 4 GiB; the
prefill codes (``prepare``, float32) peak at about 5 x the float32 keys = 20 GiB; scoring
temporaries ~1.5 GiB: well under 70 GiB. The scoring, selection and gather+attend parts and the
``prepare`` time are recorded as values; each SDPA kernel forced in turn as values too.
"""

from __future__ import annotations

import time

import torch

from icml26.binarypc.codes import binary_pcs, hash_keys, unpack_signs
from icml26.binarypc.methods import BinaryPCConfig, make_method
from icml26.binarypc.patch import sparse_decode
from icml26.binarypc.select import (
    budget,
    code_scores,
    project_query,
    select_tokens,
    sparse_attention,
)

WEIGHT = 3.0

#: the tensor path: identical selections to the C++ CPU kernel (tested in tests/binarypc), and no
#: one-minute compile on a bare machine; on CUDA every backend is the tensor path anyway
BACKEND = "torch"


def run(ctx) -> None:
    with ctx.exact():
        _check_codes(ctx)
        _check_selection(ctx)
        _check_step(ctx)
    shape = ctx.pick(tiny=dict(B=1, Hq=8, Hkv=2, D=32, contexts=(1024, 4096)),
                     paper=dict(B=8, Hq=32, Hkv=8, D=128, contexts=(32768, 131072)))
    for i, L in enumerate(shape["contexts"]):
        need = 2.0 + 6.0 * L / 131072 if ctx.is_cuda else 0.3  # prepare + warm-up + timings
        if i and not ctx.enough(need):
            ctx.note(f"skipped the {L}-token step: {ctx.remaining():.0f} s left of the share")
            continue
        _time_step(ctx, L, shape["B"], shape["Hq"], shape["Hkv"], shape["D"])


# -- correctness ---------------------------------------------------------------------------------
def _inputs(B=2, Hq=8, Hkv=2, L=512, D=32, seed=0):
    """q (B, Hq, D), keys/values (B, Hkv, L, D) float64 on the CPU; keys with a few dominant
    directions (like real post-RoPE keys) so the binary components are well defined."""
    g = torch.Generator().manual_seed(seed)
    basis = torch.randn(4, D, generator=g, dtype=torch.float64) * 3.0
    keys = torch.randn(B, Hkv, L, D, generator=g, dtype=torch.float64)
    keys = keys + torch.randn(B, Hkv, L, 4, generator=g, dtype=torch.float64) @ basis
    values = torch.randn(B, Hkv, L, D, generator=g, dtype=torch.float64)
    q = torch.randn(B, Hq, D, generator=g, dtype=torch.float64)
    return q, keys, values


def _check_codes(ctx) -> None:
    """Directions (float64) close; codes of the same keys on the same directions bit-exact."""
    _, keys, _ = _inputs()
    V_cpu = binary_pcs(keys, 64, 4, generator=torch.Generator().manual_seed(1))
    V_dev = binary_pcs(keys.to(ctx.device), 64, 4, generator=torch.Generator().manual_seed(1))
    scale = float(V_cpu.abs().max())
    # float64 GEMV sums of 512 terms: ~1e-13 relative; a flipped sign would move a direction by
    # O(|v|), so a 1e-9 bound separates the two
    ctx.close("directions binary_pcs (float64, device vs CPU)", V_dev, V_cpu, atol=1e-9 * scale,
              note="64 directions x 2 KV heads x 2 rows, head dim 32")
    codes_cpu = hash_keys(keys, V_cpu)
    codes_dev = hash_keys(keys.to(ctx.device), V_cpu.to(ctx.device))
    ctx.equal("codes hash_keys (float64, CPU's directions, device vs CPU)", codes_dev, codes_cpu)


def _brute_scores(pint, scale, codes, Hkv):
    """max over each GQA group of (Σ_b pint_b·sign_b) · scale, float64, from unpacked ±1 signs."""
    B, Hq, bits = pint.shape
    s = unpack_signs(codes, bits, dtype=torch.float64)  # (B, Hkv, L, bits)
    s = s.repeat_interleave(Hq // Hkv, dim=1)  # (B, Hq, L, bits)
    tot = torch.einsum("bhk,bhlk->bhl", pint.double(), s) * scale.double()[..., None]
    return tot.reshape(B, Hkv, Hq // Hkv, -1).amax(2)


def _brute_select(scores, forced, k):
    """Indices (B, Hkv, k) ascending: forced tokens first, then by score, ties to the later token
    (a Python sort of each row)."""
    B, Hkv, P = scores.shape
    out = torch.empty(B, Hkv, k, dtype=torch.long)
    for b in range(B):
        for h in range(Hkv):
            s = scores[b, h].tolist()
            f = forced[b, h].tolist() if forced is not None else [False] * P
            order = sorted(range(P), key=lambda i: (f[i], s[i], i), reverse=True)
            out[b, h] = torch.tensor(sorted(order[:k]))
    return out


def _check_selection(ctx) -> None:
    """Projection, scores and the selection on the device vs the CPU, from the same codes."""
    q64, keys, _ = _inputs()
    q = q64.float()
    m = make_method(BinaryPCConfig(backend=BACKEND))
    meta = m.prepare(keys.float(), torch.Generator().manual_seed(1))  # CPU codes + directions
    Hkv, L = keys.shape[1], keys.shape[2]
    dev, V = ctx.device, meta["V"]
    # float64: the projection p = q·V is exact to ~1e-15, so every rounding agrees
    pint_c64, _ = project_query(q64, V.double(), Hkv)
    pint_d64, _ = project_query(q64.to(dev), V.double().to(dev), Hkv)
    ctx.equal("int8 query projection (float64, device vs CPU)", pint_d64, pint_c64)
    # float32 (the paper path): equal except where p / scale lies on a rounding boundary (x.5)
    pint_c, sc_c = project_query(q, V, Hkv)
    pint_d, _ = project_query(q.to(dev), V.to(dev), Hkv)
    ratio = project_query(q, V, Hkv, quantize=False)[0].double() / sc_c.double()[..., None]
    near = ((ratio - ratio.floor()) - 0.5).abs() < 1e-4
    diff = pint_d.cpu() != pint_c
    bad = int((diff & ~near).sum())
    ctx.check("int8 query projection (float32, device vs CPU), off rounding boundaries",
              bad == 0, err=bad, tol=0,
              note=f"{int(diff.sum())} of {diff.numel()} differ; {int(near.sum())} lie within "
                   "1e-4 of x.5 (float32 noise may round those either way)")
    s_cpu = code_scores(q, meta["codes"], V, backend=BACKEND)
    # exact integer sums times a float32 scale: the scale may differ in its last bits
    tol = 4 * torch.finfo(torch.float32).eps * float(s_cpu.abs().max())
    if bool(diff.any()):
        ctx.note("code scores device vs CPU not compared: a float32 projection rounded "
                 "differently on a boundary (see the check above)")
    else:
        s_dev = code_scores(q.to(dev), meta["codes"].to(dev), V.to(dev), backend=BACKEND)
        ctx.close("code scores (float32, device vs CPU)", s_dev, s_cpu, atol=tol,
                  note="(B, Hkv, P) = (2, 2, 512)")
    ctx.close("code scores vs brute-force ±1 sum (float64)", s_cpu,
              _brute_scores(pint_c, sc_c, meta["codes"], Hkv), atol=tol)
    k = budget(L, 0.98, 32)  # 32 of 512 (the 2% rule's floor at this size)
    _, forced = m.score(q, meta, k)  # the error set (3 worst-reconstructed keys per row)
    idx_cpu = select_tokens(s_cpu, k, L, forced=forced, backend=BACKEND)
    idx_dev = select_tokens(s_cpu.to(ctx.device), k, L, forced=forced.to(ctx.device),
                            backend=BACKEND)
    ctx.equal("select_tokens (CPU's scores, device vs CPU)", idx_dev, idx_cpu,
              note=f"k {k} of {L}, error set {int(forced[0, 0].sum())} per row")
    ctx.equal("select_tokens vs brute-force sort (tie: later token)", idx_cpu,
              _brute_select(s_cpu, forced, k))


def _step(ctx, q, keys, values, k, sc):
    """(output, selection, scores) of one whole decode step (online directions, seed 1) on the
    CPU and on the device, all moved back to the CPU."""
    L = keys.shape[2]
    res = {}
    for label, dev in (("cpu", ctx.cpu), ("dev", ctx.device)):
        m = make_method(BinaryPCConfig(backend=BACKEND))
        meta = m.prepare(keys.to(dev), torch.Generator().manual_seed(1))
        out, idx = sparse_decode(m, meta, L, q.to(dev), keys.to(dev), values.to(dev), sc, k)
        s, _ = m.score(q.to(dev), meta, k)
        res[label] = (out.cpu(), idx.cpu(), s.cpu())
    return res["cpu"], res["dev"]


def _check_step(ctx) -> None:
    """One whole decode step (prepare + score + select + attend) on each device, same inputs."""
    q64, keys64, values64 = _inputs(seed=3)
    L, D = keys64.shape[2], keys64.shape[3]
    k, sc = budget(L, 0.98, 32), D**-0.5
    # float64: every float decision (direction signs, code bits, int8 rounding) agrees
    (o_c, i_c, _), (o_d, i_d, _) = _step(ctx, q64, keys64, values64, k, sc)
    ctx.equal("whole step selection (float64, device vs CPU)", i_d, i_c,
              note=f"prepare + score + select, k {k} of {L}")
    ctx.close("whole step output (float64, device vs CPU)", o_d, o_c, atol=1e-12,
              note=f"exact softmax over {k} tokens, head dim {D}")
    ref = _masked_attention(q64, keys64, values64, i_c, sc)
    ctx.close("sparse output vs float64 softmax over the same tokens", o_c, ref, atol=1e-12)
    # float32 (the paper path): a direction sign or an int8 rounding may be decided by float32
    # noise (|A v| ~ 1e-7 of its terms), so equality is required only where the scores agree
    q, keys, values = q64.float(), keys64.float(), values64.float()
    (o_c, i_c, s_c), (o_d, i_d, s_d) = _step(ctx, q, keys, values, k, sc)
    overlap = float((i_c[..., :, None] == i_d[..., None, :]).any(-1).float().mean())
    ctx.value("whole step float32: selected-index overlap device vs CPU", f"{overlap:.4f}")
    if torch.equal(s_c, s_d):
        ctx.equal("whole step selection (float32, device vs CPU)", i_d, i_c,
                  note="scores equal on both devices: selections bit-exact")
    else:
        n = int((s_c != s_d).sum())
        ctx.check("whole step selection overlap (float32, device vs CPU) >= 0.8", overlap >= 0.8,
                  err=1 - overlap, tol=0.2,
                  note=f"{n} of {s_c.numel()} float32 scores differ (float32 noise decided a "
                       "direction sign or a rounding): overlap, not equality")
    if torch.equal(i_c, i_d):
        tol = 8 * torch.finfo(torch.float32).eps * (k ** 0.5) * float(values.abs().max())
        ctx.close("whole step output (float32, device vs CPU)", o_d, o_c, atol=tol)


def _masked_attention(q, keys, values, idx, scaling):
    """float64 softmax attention of each query head over its KV head's tokens ``idx``."""
    B, Hq, D = q.shape
    Hkv, L = keys.shape[1], keys.shape[2]
    G = Hq // Hkv
    mask = torch.zeros(B, Hkv, L, dtype=torch.bool).scatter_(-1, idx, True)
    logits = torch.einsum("bhgd,bhld->bhgl", q.reshape(B, Hkv, G, D), keys) * scaling
    logits = logits.masked_fill(~mask[:, :, None], float("-inf"))
    return torch.einsum("bhgl,bhld->bhgd", logits.softmax(-1), values).reshape(B, Hq, D)


# -- timing --------------------------------------------------------------------------------------
def _time_step(ctx, L, B, Hq, Hkv, D) -> None:
    """Dense SDPA vs the BinaryPC step at context ``L`` (2% budget), same inputs."""
    dev, dt = ctx.device, ctx.dtype
    g = torch.Generator(device=dev).manual_seed(L)
    K = torch.randn(B, Hkv, L, D, generator=g, device=dev, dtype=dt)
    Vv = torch.randn(B, Hkv, L, D, generator=g, device=dev, dtype=dt)
    q = torch.randn(B, Hq, D, generator=g, device=dev, dtype=dt)
    m = make_method(BinaryPCConfig(backend=BACKEND))
    t0 = time.perf_counter()
    meta = m.prepare(K, torch.Generator().manual_seed(1))  # directions + codes + error order
    ctx.sync()
    prep_s = time.perf_counter() - t0
    k, sc = budget(L, 0.98, 128), D**-0.5
    q4 = q[:, :, None]  # (B, Hq, 1, D)

    def dense():
        return torch.nn.functional.scaled_dot_product_attention(q4, K, Vv, scale=sc,
                                                                enable_gqa=True)

    def sparse():
        return sparse_decode(m, meta, L, q, K, Vv, sc, k)[0]

    it = ctx.pick(tiny=dict(warmup=1, iters=2), paper=dict(warmup=3, iters=10))
    tag = f"{L // 1024}k" if L >= 1024 else str(L)
    row = ctx.compare(f"decode attention step, context {tag}", "dense SDPA (enable_gqa)", dense,
                      sparse, note=f"ms; B {B}, heads {Hq}/{Hkv}, d {D}, "
                                   f"{str(dt).replace('torch.', '')}, budget {k} tokens "
                                   f"({100 * k / L:.1f}%)", **it)
    ctx.value(f"{tag}: dense / BinaryPC speed-up", f"{row.baseline_ms / row.method_ms:.2f}x")
    ctx.value(f"{tag}: prepare (directions + codes of {L} keys)", f"{prep_s:.3f} s")
    s, forced = m.score(q, meta, k)
    idx = select_tokens(s, k, L, forced=forced, backend=BACKEND)
    parts = {
        "score": lambda: m.score(q, meta, k),
        "select": lambda: select_tokens(s, k, L, forced=forced, backend=BACKEND),
        "gather+attend": lambda: sparse_attention(q, K, Vv, idx, sc),
    }
    small = dict(warmup=1, iters=ctx.pick(tiny=1, paper=5))
    ctx.value(f"{tag}: BinaryPC parts (ms)", ", ".join(
        f"{n} {ctx.time(f, **small):.3f}" for n, f in parts.items()))
    if ctx.is_cuda:
        _forced_kernels(ctx, tag, dense, small)


def _forced_kernels(ctx, tag, dense, it) -> None:
    """Dense SDPA with each kernel forced (a value per kernel; 'n/a' where it does not apply)."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as exc:  # pragma: no cover - torch >= 2.3 has it
        ctx.note(f"sdpa_kernel unavailable: {exc}")
        return
    out = []
    for name in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"):
        be = getattr(SDPBackend, name, None)
        if be is None:
            continue
        try:
            with sdpa_kernel([be]):
                out.append(f"{name.lower()} {ctx.time(dense, **it):.3f}")
        except Exception as exc:  # noqa: BLE001 - a kernel that does not apply is information
            out.append(f"{name.lower()} n/a ({type(exc).__name__})")
    ctx.value(f"{tag}: dense SDPA per forced kernel (ms)", "; ".join(out))
