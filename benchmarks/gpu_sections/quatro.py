"""QUATRO (``tr_dual``): the trust-region-dual loss and its gradient on the device equal the CPU's;
its loss + backward against GRPO's on the same batch.

Checked (float64, Q = 4 queries x G = 8 responses x 16 tokens, ragged completion masks, one
query with equal rewards so its dual is 0):

- per-query duals ``solve_dual`` (30 bisection + 8 Newton steps, float64), the ``tr_dual`` loss
  and its gradient w.r.t. the per-token log-probs on the device vs the CPU (close to float64
  round-off); the GRPO baseline's loss and gradient likewise;
- independent references: the gradient against the closed form
  ``d loss / d logp_it = -mask_it rho_i (A_i - lambda_x log rho_i) / B`` (k3 penalty, sequence
  ratio), and each binding dual against its defining equation ``KL(w_lambda ‖ uniform) = delta``
  (``lambda = 0`` exactly where the constraint cannot bind).

Timed (ms per loss + backward, median, CUDA events): GRPO's clipped token-level loss vs
``tr_dual`` (dual solve included) on one batch of Q x G sequences x T tokens, float32 per-token
log-probs with a (B, T) leaf in front so backward does real work (as ``benchmarks/quatro.py``).
Paper shapes: 32 queries x G = 8 x 1,024 tokens (the GPU check the method's doc names). Target:
tr_dual <= 1.2x GRPO (the method's issue). Also ``solve_dual`` alone for 1,024 queries (ms).
Memory: a handful of (256, 1024) float32 tensors, ~1 MiB each.
"""

from __future__ import annotations

import math

import torch

from icml26.quatro.dual import group_advantages, solve_dual, tilt_kl
from icml26.quatro.losses import loss_config, policy_loss

WEIGHT = 1.0

G = 8
DELTA = 0.05
EPS64 = 2.0 ** -53


def run(ctx) -> None:
    _check(ctx)
    _time(ctx)


def _batch(q: int, t: int, dtype, device, seed: int = 0):
    """old (B, T), noise (B, T), mask (B, T) ragged, rewards (B,) in {0, 1}; query 0 all-equal."""
    g = torch.Generator().manual_seed(seed)
    b = q * G
    old = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3
    noise = 0.1 * torch.randn(b, t, generator=g, dtype=torch.float64)
    lengths = torch.randint(t // 2, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).to(torch.float64)
    rewards = torch.randint(0, 2, (b,), generator=g).to(torch.float64)
    rewards[:G] = 1.0  # one query with equal rewards: lambda = 0, no update
    rewards[G:G + 2] = torch.tensor([1.0, 0.0])  # every other query has both outcomes
    return [x.to(device, dtype) for x in (old, noise, mask, rewards)]


def _loss_and_grad(method: str, device, q: int = 4, t: int = 16):
    old, noise, mask, rewards = _batch(q, t, torch.float64, device)
    logp = (old + noise).requires_grad_()
    loss, stats = policy_loss(logp, old, rewards, mask, G, loss_config(method, delta=DELTA))
    loss.backward()
    return loss.detach(), logp.grad, stats["lam"], (old, noise, mask, rewards)


def _check(ctx) -> None:
    for method, label in (("tr_dual", "tr_dual"), ("grpo", "GRPO")):
        dev = _loss_and_grad(method, ctx.device)
        ref = _loss_and_grad(method, ctx.cpu)
        # sums of <= B * T = 512 float64 terms of size ~1: round-off ~1e-13
        ctx.close(f"{label} loss (float64, 32 seqs x 16 tokens), device vs CPU", dev[0], ref[0],
                  atol=1e-12)
        ctx.close(f"{label} d loss / d logp, device vs CPU", dev[1], ref[1], atol=1e-12)
        if method == "tr_dual":
            ctx.close("solve_dual per-query lambda (float64), device vs CPU", dev[2], ref[2],
                      atol=1e-10, rtol=1e-10)
            _independent(ctx, *dev)


def _independent(ctx, loss, grad, lam, batch) -> None:
    """The device's gradient vs the closed form; each binding dual vs KL(w_lambda ‖ u) = delta."""
    old, noise, mask, rewards = (x.cpu() for x in batch)
    lam = lam.cpu()
    adv = group_advantages(rewards, G)
    log_rho = (noise * mask).sum(1)  # logp - old = noise on the completion tokens
    rho = log_rho.exp()
    factor = -rho * (adv - lam.repeat_interleave(G) * log_rho) / len(rewards)
    ctx.close("tr_dual gradient on the device vs the closed form "
              "-mask rho (A - lambda log rho) / B", grad, factor[:, None] * mask, atol=1e-12)
    a = adv.view(-1, G)
    binding = lam > 0
    kl = tilt_kl(a[binding], lam[binding])
    err = float((kl - DELTA).abs().max()) if bool(binding.any()) else 0.0
    ctx.check(f"device duals solve KL(w_lambda ‖ uniform) = delta ({int(binding.sum())} binding "
              f"queries)", err <= 1e-9, err=err, tol=1e-9, note="nats")
    # a query binds iff delta < log(G / n_max) (n_max responses at the top advantage)
    n_max = (a >= a.max(1, keepdim=True).values - 1e-12).sum(1).double()
    should = (a.max(1).values > a.min(1).values) & (math.log(G) - n_max.log() > DELTA)
    ctx.equal("duals zero exactly where the constraint cannot bind", binding, should)


def _time(ctx) -> None:
    q, t = ctx.pick(tiny=(4, 32), paper=(32, 1024))
    iters = ctx.pick(tiny=3, paper=20)
    old, noise, mask, rewards = _batch(q, t, torch.float32, ctx.device, seed=1)
    w = torch.zeros_like(old, requires_grad=True)  # the "policy": backward reaches a leaf

    def step(method):
        cfg = loss_config(method, delta=DELTA)

        def fn():
            loss, _ = policy_loss(old + noise + w, old, rewards, mask, G, cfg)
            loss.backward()
            w.grad = None
        return fn

    ctx.compare(f"tr_dual loss + backward ({q} x {G} seqs x {t} tokens, float32)",
                "GRPO loss + backward", step("grpo"), step("tr_dual"), warmup=2, iters=iters,
                target=1.2, note="dual solve included")
    adv = group_advantages(torch.randint(0, 2, (1024 * G,), generator=torch.Generator()
                                         .manual_seed(2)).double(), G).to(ctx.device)
    ms = ctx.time(lambda: solve_dual(adv, DELTA, G), warmup=1, iters=ctx.pick(tiny=2, paper=10))
    ctx.value(f"solve_dual, 1,024 queries x G = {G} (30 bisection + 8 Newton steps, float64)",
              f"{ms:.2f} ms")
