"""Quartet II: NVFP4 bits on the device equal the CPU's; MS-EDEN is unbiased; the cost of the
simulated ``QuartetIILinear`` forward + backward against a bf16 ``nn.Linear``.

Checked:

- NVFP4 quantization (``quantize_nvfp4``; RTN and 4/6 on 1x16 blocks, RTN on NVIDIA's 16x16
  weight tiles) of the same float32 input on the device and on the CPU: E2M1 codes, E4M3 block
  scales and the FP32 tensor scale bit-exact (one row per mode, mismatches counted per part);
  inputs: Gaussian rows spread over 2^-6..2^6, and exact E2M1 midpoints (ties) on power-of-two
  block scales. At paper shapes also a 2048 x 4096 activation (more elements near the rounding
  boundaries).
- independent reference: the device's RTN codes against a brute-force nearest E2M1 value (float64
  distances, ties to the even code) of ``x / (s_block * s_tensor)``.
- MS-EDEN (``ms_eden``) with the same signs and scale noise on the device and the CPU, on an input
  whose randomized Hadamard transform is exact in float32 (small integers, h = 64, entries 1/8):
  codes and SR-rounded scales bit-exact, EDEN corrections close.
- MS-EDEN unbiasedness on the device: the mean of N draws (fresh signs and scale noise each,
  rotated back) approaches the input; statistic ``mean_i (mean_i - x_i)^2 / (var_i / N)`` (1 for an
  unbiased estimator, spread sqrt(2/M) over M elements), and the mean's relative error falls
  ~2x from N/4 to N draws.
- ``QuartetIILinear`` forward (float32) on the device vs the CPU and vs ``Q(X) Q(W)^T + b`` in
  float64 (tolerance from K float32 products); one backward on the device: dX and dW within the
  MS-EDEN error of ``dY Q(W)`` and ``dY^T Q(X)``.

Timed (ms per forward + backward, median, CUDA events): bf16 ``nn.Linear`` vs ``QuartetIILinear``
(and ``NvidiaNVFP4Linear``) at 4096 x 4096 with 8192 tokens (paper shapes), bf16 in and out. This
is the cost of the bit-exact *simulation* (every quantizer as float32 elementwise ops, GEMMs on
the dequantized float32 values): H100/H200 have no FP4 tensor cores, so the paper's 4.2x over bf16
(Blackwell kernels) is not what this measures. Also: quantizer throughput (M elements/s) and peak
memory. Memory at paper shapes: weights 32 MiB bf16 (+ 64 MiB float32 copies), X/dY 64 MiB bf16
each; the float32 simulation holds ~10 tensors of 128 MiB (X, Q(X), dY, rotated copies, codes) at
its peak: < 3 GiB.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from icml26.quartet2.eden import ms_eden, random_signs, rht
from icml26.quartet2.linear import NvidiaNVFP4Linear, QuartetIILinear
from icml26.quartet2.nvfp4 import E2M1_GRID, fake_quant, quantize_nvfp4

WEIGHT = 3.0

EPS32 = 2.0 ** -24  # float32 unit roundoff
#: midpoints of the E2M1 grid and where ties to even send them (values, not codes)
MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
RECIPROCAL_NOTE = ("torch's CUDA true-divide by a Python float computes a * (1/b) (CPU divides); "
                   "nvfp4.tensor_scale / block_scales_rtn divide by a 0-dim device tensor "
                   "(nvfp4._div) to avoid it, so a mismatch means another step of the quantizer "
                   "rounds differently on this device: a one-ulp scale difference flips codes at "
                   "rounding boundaries")


def run(ctx) -> None:
    _check_rtn_bits(ctx)
    _check_torchao_compat(ctx)
    _check_backends(ctx)
    _check_eden_bits(ctx)
    _check_eden_unbiased(ctx)
    _check_linear(ctx)
    _time_linear(ctx)


# -- NVFP4 bit-exactness -------------------------------------------------------------------------
def _gaussian(rows: int, cols: int, seed: int) -> torch.Tensor:
    """(rows, cols) float32 on the CPU: Gaussian rows scaled by 2^U(-6, 6), one all-zero block and
    one outlier (the tensor absmax)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g) * torch.exp2(torch.rand(rows, 1, generator=g) * 12 - 6)
    x[0, :16] = 0.0
    x[1, 5] = 4000.0
    return x


def _ties(rows: int = 32, cols: int = 64, seed: int = 1) -> torch.Tensor:
    """Every value an exact E2M1 midpoint (or 6) times a power-of-two block scale, and the tensor
    absmax 2688 = 448 * 6, so the tensor scale is exactly 1 and every u = x / scale is a tie."""
    g = torch.Generator().manual_seed(seed)
    block = torch.tensor([6.0, *MIDPOINTS, *[-m for m in MIDPOINTS], 0.0])  # one 16-block
    x = block.repeat(rows, cols // 16)  # the 6 sets each block's scale to 2^j
    j = torch.randint(-6, 8, (rows, cols // 16), generator=g).float()  # E4M3 normals 2^-6..2^7
    x = x * torch.exp2(j).repeat_interleave(16, 1)
    x[0, 0] = 2688.0
    return x


def _parts(q) -> dict[str, torch.Tensor]:
    return {"codes": q.codes.cpu(), "scales": q.scales.view(torch.uint8).cpu(),
            "tensor scale": q.tensor_scale.reshape(1).view(torch.int32).cpu()}


def _bits_equal(ctx, name: str, dev_q, cpu_q) -> bool:
    """One check row: codes, E4M3 scale bytes and the tensor scale's bits all equal."""
    a, b = _parts(dev_q), _parts(cpu_q)
    diff = {k: int((a[k] != b[k]).sum()) for k in a}
    n = sum(diff.values())
    note = "bit-exact" if n == 0 else "differ: " + ", ".join(f"{k} {v}" for k, v in diff.items()
                                                             if v)
    return ctx.check(name, n == 0, err=float(n), tol=0.0, note=note)


def _brute_force_codes(x: torch.Tensor, q) -> torch.Tensor:
    """Nearest E2M1 value of u = x / (s_block * s_tensor) by float64 distances to all 8
    magnitudes, ties to the even code; sign bit from u. 1x16 blocks; (rows, cols) uint8."""
    s = q.scales.cpu().float().repeat_interleave(16, 1) * q.tensor_scale.cpu()
    u = x / s  # float32, as the quantizer forms it
    grid = torch.tensor(E2M1_GRID, dtype=torch.float64)
    dist = (u.abs().double().clamp(max=6.0)[..., None] - grid).abs()  # (rows, cols, 8)
    best = dist.min(-1, keepdim=True).values
    tied = dist == best
    even = tied & (torch.arange(8) % 2 == 0)
    pick = torch.where(even.any(-1, keepdim=True), even, tied).to(torch.uint8).argmax(-1)
    return pick.to(torch.uint8) | (torch.signbit(u).to(torch.uint8) << 3)


def _check_rtn_bits(ctx) -> None:
    x = _gaussian(64, 256, seed=0)
    ties = _ties()
    cases = [("NVFP4 RTN 1x16, Gaussian rows 2^-6..2^6", x, {}),
             ("NVFP4 4/6 1x16 (QuartetIILinear's forward), Gaussian rows", x,
              {"mode": "four_over_six"}),
             ("NVFP4 RTN 16x16 tiles (NVIDIA weight layout), Gaussian rows", x,
              {"block": (16, 16)}),
             ("NVFP4 RTN 1x16 on exact E2M1 midpoints (ties to even)", ties, {})]
    if ctx.scale == "paper" and ctx.enough(20):
        cases.append(("NVFP4 RTN 1x16, 2048 x 4096 activation", _gaussian(2048, 4096, seed=2), {}))
    ok = True
    for name, inp, kw in cases:
        dev_q = quantize_nvfp4(inp.to(ctx.device), **kw)
        ok &= _bits_equal(ctx, name + ": codes + scales + tensor scale, device vs CPU",
                          dev_q, quantize_nvfp4(inp, **kw))
    for label, inp in (("Gaussian rows", x), ("E2M1 midpoints", ties)):
        dev_q = quantize_nvfp4(inp.to(ctx.device))
        ctx.equal(f"RTN codes on the device vs brute-force nearest E2M1, ties to even ({label})",
                  dev_q.codes.cpu(), _brute_force_codes(inp, dev_q))
    # a diagnosis for the bit checks: does this device divide by a Python float exactly?
    mags = x.abs().flatten().to(ctx.device)
    by_scalar = mags / 6.0  # what block_scales_rtn does (v_max = 6)
    by_tensor = mags / torch.tensor(6.0, device=ctx.device)
    n_diff = int((by_scalar != by_tensor).sum())
    ctx.value("x / 6.0 (Python float) vs x / tensor(6.0) on the device", f"{n_diff} of "
              f"{mags.numel()} values differ (nonzero: the device divides by a scalar as "
              f"a * (1/b); the quantizer uses nvfp4._div, a true division, for this reason)")
    if not ok:
        ctx.note("NVFP4 bit mismatch: " + RECIPROCAL_NOTE + (
            f" (confirmed: {n_diff} of {mags.numel()} x / 6.0 differ)" if n_diff else ""))


def _check_torchao_compat(ctx) -> None:
    """compat="torchao" on the device against torchao's own NVFP4 quantizer on the device (when
    torchao imports there); the CPU comparison is in tests/quartet2/test_quartet2_compat.py."""
    x = _gaussian(64, 256, seed=8)
    dev_q = quantize_nvfp4(x.to(ctx.device), compat="torchao")
    cpu_q = quantize_nvfp4(x, compat="torchao")
    a, b = _parts(dev_q), _parts(cpu_q)
    ctx.value("compat='torchao' device vs CPU (differing codes / scale bytes / tensor scale)",
              " / ".join(str(int((a[k] != b[k]).sum())) for k in a) + " (torchao divides by "
              "Python floats, which CUDA may turn into a reciprocal product: not required equal)")
    if not ctx.is_cuda:
        # the CPU comparison is a unit test; importing torchao here would make transformers
        # import it too (+2 s) in every later section of this process
        ctx.note("compat='torchao' vs torchao: CPU covered by tests/quartet2/test_quartet2_compat.py")
        return
    import sys
    from pathlib import Path

    ref = Path(sys.prefix) / "torchao-ref"  # where `make setup` puts it (out of site-packages)
    if ref.is_dir() and str(ref) not in sys.path:
        sys.path.append(str(ref))
    try:
        from torchao.prototype.mx_formats.nvfp4_tensor import (
            nvfp4_quantize,
            per_tensor_amax_to_scale,
        )
    except Exception as e:  # noqa: BLE001 - any import failure means "not available here"
        ctx.note(f"torchao not importable on this machine ({type(e).__name__}): compat check skipped")
        return
    xd = x.to(ctx.device)
    s_t = per_tensor_amax_to_scale(torch.max(torch.abs(xd)))
    scales, packed = nvfp4_quantize(xd, 16, s_t)
    n = int((dev_q.scales.view(torch.uint8).reshape(scales.shape) != scales.view(torch.uint8)).sum()
            + (dev_q.packed().reshape(packed.shape) != packed).sum()
            + (dev_q.tensor_scale.view(torch.int32) != s_t.view(torch.int32)).sum())
    ctx.check("compat='torchao' vs torchao nvfp4_quantize on the device: scales + packed codes + "
              "tensor scale", n == 0, err=float(n), tol=0.0, note="bit-exact required")


def _check_backends(ctx) -> None:
    """What backend="te" / "torchao" says on this machine (NVFP4 kernels need Blackwell)."""
    from icml26.core.errors import UserError
    from icml26.quartet2.backends import check_backend

    for backend in ("te", "torchao"):
        try:
            check_backend(backend, "nvidia", ctx.device if ctx.is_cuda else None)
            msg = "available"
        except UserError as e:
            msg = f"unavailable: {e}"
        ctx.value(f"Quartet2Config(backend={backend!r}) on this machine", msg)


def _check_eden_bits(ctx) -> None:
    """ms_eden with fixed signs and noise on an input whose RHT is exact in float32."""
    g = torch.Generator().manual_seed(3)
    x = torch.randint(-40, 41, (32, 256), generator=g).float()  # |partial sums| << 2^24
    signs = random_signs(64, g)  # h = 64: Hadamard entries +-1/8, exact products
    noise = torch.rand(32, 256 // 16, generator=g)
    dev = ms_eden(x.to(ctx.device), signs.to(ctx.device), scale_noise=noise.to(ctx.device))
    ref = ms_eden(x, signs, scale_noise=noise)
    ctx.equal("RHT (h = 64) of small integers, device vs CPU (exact in float32)",
              rht(x.to(ctx.device), signs.to(ctx.device)).cpu(), rht(x, signs))
    _bits_equal(ctx, "MS-EDEN, same signs and scale noise: codes + SR scales + tensor scale, "
                     "device vs CPU", dev.q, ref.q)
    ctx.close("MS-EDEN corrections c = sum u^2 / sum u q per 64-group, device vs CPU",
              dev.correction, ref.correction,
              atol=4 * 64 * EPS32 * float(ref.correction.abs().max()),
              note="float32 sums of 64 terms in another order: 4 h eps32 max c")


def _check_eden_unbiased(ctx) -> None:
    """Mean of N MS-EDEN draws (fresh signs + scale noise, rotated back) vs the input."""
    n_draws = ctx.pick(tiny=128, paper=1024)
    g = torch.Generator().manual_seed(4)
    x = (torch.randn(8, 256, generator=g) * torch.exp2(torch.rand(8, 1, generator=g) * 3)
         ).to(ctx.device)
    gen = torch.Generator(device=ctx.device).manual_seed(5)
    acc = torch.zeros_like(x, dtype=torch.float64)
    acc2 = torch.zeros_like(acc)
    quarter = None
    for k in range(1, n_draws + 1):
        d = ms_eden(x, random_signs(128, gen, ctx.device), generator=gen).dequantize(
            rotated=False).double()
        acc += d
        acc2 += d * d
        if k == n_draws // 4:
            quarter = acc / k
    x64 = x.double()
    mean = acc / n_draws
    var = (acc2 / n_draws - mean * mean).clamp_min(0) * n_draws / (n_draws - 1)
    z2 = float(((mean - x64) ** 2 / (var / n_draws).clamp_min(1e-300)).mean())
    m = x.numel()
    tol = 1.0 + 6.0 * math.sqrt(2.0 / m)
    ctx.check(f"MS-EDEN unbiased: mean of {n_draws} draws on the device vs the input "
              f"(mean z^2 over {m} elements)", z2 <= tol, err=z2, tol=tol,
              note="1 when unbiased; tolerance 1 + 6 sqrt(2/M); the random-sign Hadamard makes "
                   "EDEN unbiased only approximately (a bias floor ~1e-3 relative, seen past "
                   "~4000 draws on CPU)")
    rel = lambda a: math.sqrt(float(((a - x64) ** 2).sum() / (x64 ** 2).sum()))  # noqa: E731
    r4, r1 = rel(quarter), rel(mean)
    ctx.check(f"MS-EDEN mean's relative error falls ~2x from {n_draws // 4} to {n_draws} draws",
              r4 / r1 >= 1.5, err=r4 / r1, tol=1.5, note="ratio; 2 for an unbiased estimator")
    ctx.value(f"MS-EDEN relative error of the mean, {n_draws // 4} / {n_draws} draws",
              f"{r4:.2e} / {r1:.2e}")


# -- QuartetIILinear ------------------------------------------------------------------------------
def _check_linear(ctx) -> None:
    """Forward on the device vs the CPU (float32); one backward within MS-EDEN's error."""
    torch.manual_seed(0)
    cpu = QuartetIILinear(256, 256, bias=True)
    dev = QuartetIILinear(256, 256, bias=True, device=ctx.device)
    dev.load_state_dict(cpu.state_dict())
    g = torch.Generator().manual_seed(6)
    x = torch.randn(64, 256, generator=g) * torch.exp2(torch.rand(64, 1, generator=g) * 3)
    dy = torch.randn(64, 256, generator=g)
    xq = fake_quant(x, mode="four_over_six").double()
    wq = fake_quant(cpu.weight.detach(), mode="four_over_six").double()
    want = xq @ wq.T + cpu.bias.detach().double()
    atol = 2 * 256 * EPS32 * float((xq.abs() @ wq.abs().T).max() + cpu.bias.detach().abs().max())
    xd = x.to(ctx.device).requires_grad_()
    out = dev(xd)
    ctx.close("QuartetIILinear forward (float32, 64 x 256 -> 256), device vs CPU", out,
              cpu(x), atol=atol, note="tolerance 2 K eps32 max(abs Q(X) abs Q(W)^T)")
    ctx.close("QuartetIILinear forward on the device vs Q(X) Q(W)^T + b in float64", out, want,
              atol=atol, note="independent reference")
    out.backward(dy.to(ctx.device))
    dy64 = dy.double()
    for name, got, ref in (("dX", xd.grad, dy64 @ wq), ("dW", dev.weight.grad, dy64.T @ xq)):
        rel = math.sqrt(float(((got.cpu().double() - ref) ** 2).sum() / (ref ** 2).sum()))
        ctx.check(f"QuartetIILinear backward {name} on the device within MS-EDEN error of "
                  f"the exact product", rel <= 0.25, err=rel, tol=0.25,
                  note="relative L2 error of one draw (NVFP4: ~0.1)")


def _time_linear(ctx) -> None:
    f, t = ctx.pick(tiny=(256, 256), paper=(4096, 8192))
    iters = ctx.pick(tiny=2, paper=5)
    dt = ctx.dtype
    g = torch.Generator(device=ctx.device).manual_seed(7)
    x = torch.randn(t, f, device=ctx.device, generator=g).to(dt)
    dy = torch.randn(t, f, device=ctx.device, generator=g).to(dt)
    torch.manual_seed(0)
    layers = {"linear": nn.Linear(f, f, device=ctx.device, dtype=dt),
              "quartet2": QuartetIILinear(f, f, device=ctx.device, dtype=dt),
              "nvidia": NvidiaNVFP4Linear(f, f, device=ctx.device, dtype=dt)}

    def step(layer):
        def fn():
            xi = x.detach().requires_grad_()
            layer.weight.grad = layer.bias.grad = None
            layer(xi).backward(dy)
        return fn

    if ctx.is_cuda:
        torch.cuda.reset_peak_memory_stats(ctx.device)
    shape = f"{f} x {f}, {t} tokens, {str(dt).replace('torch.', '')} in/out"
    ctx.compare(f"QuartetIILinear fwd+bwd ({shape})", "nn.Linear fwd+bwd", step(layers["linear"]),
                step(layers["quartet2"]), warmup=1 if ctx.scale == "tiny" else 2, iters=iters,
                note="simulation (float32 quantizers + float32 GEMMs), no FP4 kernels")
    if ctx.enough(ctx.pick(tiny=0.3, paper=8.0)):
        ctx.compare(f"NvidiaNVFP4Linear fwd+bwd ({shape})", "nn.Linear fwd+bwd",
                    step(layers["linear"]), step(layers["nvidia"]), warmup=1, iters=iters,
                    note="NVIDIA's recipe, same simulation")
    else:
        ctx.note("skipped the NvidiaNVFP4Linear timing: the share is spent")
    if ctx.is_cuda:
        ctx.value("peak GPU memory during the linear timings",
                  f"{torch.cuda.max_memory_allocated(ctx.device) / 2**30:.2f} GiB")
    if ctx.enough(ctx.pick(tiny=0.3, paper=5.0)):
        xf = x.float()
        signs = random_signs(128, g, ctx.device)
        for name, fn in (("RTN", lambda: quantize_nvfp4(xf)),
                         ("4/6", lambda: quantize_nvfp4(xf, mode="four_over_six")),
                         ("MS-EDEN incl. RHT", lambda: ms_eden(xf, signs, generator=g))):
            ms = ctx.time(fn, warmup=1, iters=iters)
            ctx.value(f"{name} quantizer throughput on ({t}, {f}) float32",
                      f"{xf.numel() / ms / 1e3:.0f} M elements/s ({ms:.2f} ms)")
