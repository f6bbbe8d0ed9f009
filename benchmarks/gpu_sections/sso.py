"""SSO: the spectral-sphere step on the device equals the CPU's, is tangent to the sphere and keeps
the weight on ‖W‖₂ = R; its optimizer step time against torch's Muon at widths 1024-4096.

Checked (float64, 4 atoms of 48 x 96 with a spectral gap σ₁ = 2σ₂ so 30 power-iteration steps
give exact singular vectors; lr η = 0.02):

- ``sso_update`` on the device vs the CPU: new weights, λ and the residual h close (float64
  round-off through ~20 msign calls), the same number of msign calls (the same bracket and
  bisection decisions);
- tangency against an exact SVD (float64, on the CPU, of the device's result): the update
  ``Φ = (W_ret − W_new) / (ηR)`` satisfies |⟨u₁v₁ᵀ, Φ⟩| ≤ the solver tolerance (2e-4);
- the sphere: σ₁(W_ret) = R (the retraction) to 1e-10, and σ₁(W_new) − R ≤ 4η²R (a tangent step
  leaves the sphere at second order only; the same step with λ = 0, MuonSphere, moves it at
  first order, ηR|⟨Θ, msign(M̂)⟩|: recorded beside it).

Timed (ms per ``optimizer.step()``, median, CUDA events; gradients fixed, state warm after two
steps): ``torch.optim.Muon`` (bf16 Newton-Schulz, 5 steps) vs :class:`~icml26.sso.SSO` (float32,
8 Polar-Express steps per msign, λ by bisection from the secant seed, early exit) on the hidden
matrices of one Llama-shaped block at widths 1024, 2048, 4096 (q, o: d x d; k, v: d/4 x d, i.e.
8 KV heads of 128; gate, up: 3.5d x d; down: d x 3.5d; q/k/v split per head for SSO), float32
master weights. Target: SSO ≤ 1.5x Muon (the issue's). Recorded beside: msign calls per step,
the device-side tangency max |h| and σ/R at retraction of the timed steps. Memory at 4096: 218 M
parameters x 4 B x (weights + grads + momentum) x 2 optimizers ≈ 5.2 GiB, plus msign temporaries
(a few 2 x 4096 x 14336 float32 blocks, 0.5 GiB each): < 10 GiB. Widths are taken in increasing
order and one is skipped when the previous one's time x 6 would not fit the share (SSO costs
~d³; the fixed per-call overheads make the step from one width to the next less than 8x).
"""

from __future__ import annotations

import math
import time

import torch

# the first torch.optim.Optimizer imports torch._dynamo lazily (2-5 s on a CPU); importing it
# with the section keeps that one-off cost out of the timed share
import torch._dynamo  # noqa: F401

from icml26.sso.optim import SSO, radius, sso_update

WEIGHT = 3.0

LR = 0.02
TOL = 2e-4  # the solver tolerance (SSO's default, the paper's runs)


def run(ctx) -> None:
    _check_update(ctx)
    widths = ctx.pick(tiny=(32,), paper=(1024, 2048, 4096))
    head_dim = ctx.pick(tiny=8, paper=128)
    last = None
    for i, w in enumerate(widths):
        if last is not None and not ctx.enough(last * 6 + 2):
            ctx.note(f"skipped width {w}: {ctx.remaining():.0f} s left of the share, the last "
                     f"width took {last:.0f} s (x 6 expected)")
            break
        t0 = time.monotonic()
        _time_width(ctx, w, head_dim, tf32=ctx.is_cuda and i == len(widths) - 1)
        last = time.monotonic() - t0


# -- correctness ---------------------------------------------------------------------------------
def _gapped(b: int, m: int, n: int, g: torch.Generator) -> torch.Tensor:
    """(b, m, n) float64 with σ₁ = 2σ₂ (a clear top singular pair)."""
    a = torch.randn(b, m, n, generator=g, dtype=torch.float64)
    u, s, vh = torch.linalg.svd(a, full_matrices=False)
    s = s.clone()
    s[:, 0] = 2 * s[:, 1]
    return u @ torch.diag_embed(s) @ vh


def _update(w, m, r, mode, device):
    b = w.shape[0]
    return sso_update(w.to(device), m.to(device), None,
                      torch.zeros(b, dtype=torch.float64, device=device),
                      torch.full((b,), r, dtype=torch.float64, device=device), lr=LR, mode=mode,
                      power_iter_steps=30, solver_tol=TOL)


def _check_update(ctx) -> None:
    g = torch.Generator().manual_seed(0)
    b, m, n = 4, 48, 96
    w, mom = _gapped(b, m, n, g), torch.randn(b, m, n, generator=g, dtype=torch.float64)
    r = radius(m, n)
    dev, ref = _update(w, mom, r, "sso", ctx.device), _update(w, mom, r, "sso", ctx.cpu)
    # float64 round-off through ~20 msign calls of 8 steps on 48 x 96: ~1e-13; 1e-9 leaves room
    ctx.close("sso_update new weights (float64, 4 x 48 x 96), device vs CPU", dev.w, ref.w,
              atol=1e-9 * r)
    ctx.close("sso_update λ, device vs CPU", dev.lam, ref.lam, atol=1e-9)
    ctx.close("sso_update residual h = ⟨Θ, Φ⟩, device vs CPU", dev.h, ref.h, atol=1e-9)
    ctx.check("sso_update msign calls, device vs CPU (same bisection decisions)",
              dev.evals == ref.evals, err=abs(dev.evals - ref.evals), tol=0,
              note=f"{dev.evals} vs {ref.evals} calls")
    # the geometry, from the device's result, against an exact float64 SVD on the CPU
    sigma = dev.sigma.cpu()
    w_ret = w * (r / sigma).view(-1, 1, 1)
    phi = (w_ret - dev.w.cpu()) / (LR * r)
    u, s, vh = torch.linalg.svd(w_ret)
    theta = u[:, :, :1] @ vh[:, :1, :]  # u₁v₁ᵀ (sign-free)
    tang = float((theta * phi).sum((-2, -1)).abs().max())
    ctx.check("tangency: max abs ⟨u₁v₁ᵀ, Φ⟩ of the device's update, exact SVD (float64)",
              tang <= TOL + 1e-9, err=tang, tol=TOL, note="solver tolerance")
    on = float((s[:, 0] / r - 1).abs().max())
    ctx.check("σ₁(W_ret) = R after the retraction (exact SVD)", on <= 1e-10, err=on, tol=1e-10,
              note="relative")
    drift = float((torch.linalg.matrix_norm(dev.w.cpu(), ord=2) / r - 1).abs().max())
    ctx.check("σ₁(W_new) stays on the sphere to second order: abs(σ₁/R − 1) ≤ 4η²",
              drift <= 4 * LR ** 2, err=drift, tol=4 * LR ** 2, note="η = 0.02, gap σ₁ = 2σ₂")
    ms = _update(w, mom, r, "muonsphere", ctx.device)
    ms_drift = float((torch.linalg.matrix_norm(ms.w.cpu(), ord=2) / r - 1).abs().max())
    ctx.value("abs(σ₁(W_new)/R − 1), SSO vs the same step with λ = 0 (MuonSphere)",
              f"{drift:.1e} vs {ms_drift:.1e} (MuonSphere's max abs ⟨Θ, Φ⟩ = "
              f"{float(ms.h.abs().max()):.2f})")


# -- timing --------------------------------------------------------------------------------------
def _block_shapes(d: int) -> dict[str, tuple[int, int]]:
    """(rows, cols) of the hidden matrices of one Llama-shaped block of width d: k/v with d/4
    rows (Llama-3-8B's 8 KV heads x 128 at d = 4096), intermediate 3.5d (14336 at 4096)."""
    kv, ffn = d // 4, int(3.5 * d)
    return {"q_proj": (d, d), "k_proj": (kv, d), "v_proj": (kv, d), "o_proj": (d, d),
            "gate_proj": (ffn, d), "up_proj": (ffn, d), "down_proj": (d, ffn)}


def _params(ctx, d: int, seed: int) -> tuple[list, list]:
    """(qkv params, other params): float32 leaves on the device with fixed random gradients."""
    g = torch.Generator(device=ctx.device).manual_seed(seed)
    qkv, rest = [], []
    for name, (m, n) in _block_shapes(d).items():
        p = torch.nn.Parameter(torch.randn(m, n, device=ctx.device, generator=g) / math.sqrt(n))
        p.grad = torch.randn(m, n, device=ctx.device, generator=g) * 1e-2
        (qkv if name in ("q_proj", "k_proj", "v_proj") else rest).append(p)
    return qkv, rest


def _time_width(ctx, d: int, head_dim: int, tf32: bool) -> None:
    qkv_s, rest_s = _params(ctx, d, seed=1)
    qkv_m, rest_m = _params(ctx, d, seed=1)  # the same values for Muon's own copy
    sso = SSO([{"params": qkv_s, "split": head_dim}, {"params": rest_s, "split": None}], lr=LR,
              solver_tol=TOL)
    sso.spectral_init_()
    muon = torch.optim.Muon([*qkv_m, *rest_m], lr=LR, momentum=0.95, nesterov=True)
    for _ in range(ctx.pick(tiny=1, paper=2)):  # warm state: λ, singular vectors, secant slopes
        sso.step()
        muon.step()
    ctx.sync()
    n_params = sum(p.numel() for p in qkv_s + rest_s)
    size = f"{n_params / 1e6:.0f} M" if n_params >= 1e6 else f"{n_params / 1e3:.0f} k"
    row = ctx.compare(f"SSO optimizer step, width {d} ({size} params, 7 matrices)",
                      "torch.optim.Muon step", muon.step, sso.step, warmup=0,
                      iters=ctx.pick(tiny=2, paper=3), target=1.5,
                      note="float32 weights; Muon's Newton-Schulz in bf16, SSO's msign in float32")
    st = sso.last_stats
    evals = st["evals"].tolist()
    hmax = float(st["h"].abs().max())
    ctx.check(f"tangency on the device, width {d}: max abs ⟨Θ, Φ⟩ over {st['h'].numel()} atoms "
              f"(float32)", hmax <= TOL, err=hmax, tol=TOL, note="solver tolerance")
    ratio = st["sigma_ratio"]
    ctx.value(f"width {d}: msign calls per shape bucket, σ/R at retraction",
              f"{evals}; σ/R in [{float(ratio.min()):.5f}, {float(ratio.max()):.5f}] "
              f"(SSO {row.method_ms:.1f} ms, Muon {row.baseline_ms:.1f} ms)")
    if tf32 and ctx.enough(row.method_ms * 6e-3 + 2):
        _tf32(ctx, d, sso)


def _tf32(ctx, d: int, sso: SSO) -> None:
    """SSO's step with TF32 float32 matmuls allowed (what a training run would usually set)."""
    old = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        ms = ctx.time(sso.step, warmup=1, iters=2)
        ctx.value(f"SSO step at width {d} with TF32 matmuls", f"{ms:.1f} ms")
    except Exception as exc:  # noqa: BLE001 - an extra, never a failure
        ctx.note(f"TF32 timing skipped: {type(exc).__name__}: {exc}")
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
