"""Per-query trust-region duals (reconstruction of QUATRO's per-prompt Lagrange multipliers).

For one query x with G sampled responses and centred advantages ``A_i = R_i - mean(R)``, the
trust-region problem ``max_pi E_pi[A]  s.t.  KL(pi || pi_old) <= delta`` restricted to the G
samples has the exponential-tilting solution ``w_i ∝ exp(A_i / lambda)`` and the convex 1-D dual

    g(lambda) = lambda * delta + lambda * log( (1/G) * sum_i exp(A_i / lambda) ),   lambda >= 0.

``g'(lambda) = delta - KL(w_lambda || uniform)`` and ``KL(w_lambda || uniform)`` falls
monotonically from ``log(G / n_max)`` (``n_max`` = number of samples at the top advantage) at
lambda -> 0 to 0 at lambda -> inf, so the minimiser is the root of ``KL(w_lambda || u) = delta``
when ``delta < log(G / n_max)`` and ``lambda = 0`` otherwise (the constraint cannot bind; this
includes the all-equal-rewards case, where A = 0 and the query contributes no update).

Everything here is batched over queries, runs a fixed number of safeguarded Newton steps on the device of
its input and never reads a value back to the host (no ``.item()``), so it can sit inside a
compiled or distributed training step.
"""

from __future__ import annotations

import math

import torch

__all__ = ["group_advantages", "solve_dual", "tilt_kl", "dual_objective"]


def _as_groups(x: torch.Tensor, group_size: int | None, name: str) -> torch.Tensor:
    if x.dim() == 2:
        if group_size is not None and x.shape[1] != group_size:
            raise ValueError(f"{name} has groups of {x.shape[1]}, but group_size={group_size}")
        if x.shape[1] < 2:
            raise ValueError(f"group size G must be >= 2; got {x.shape[1]}")
        return x
    if x.dim() != 1:
        raise ValueError(f"{name} must be (B,) or (Q, G); got shape {tuple(x.shape)}")
    if group_size is None:
        raise ValueError(f"{name} is flat (B,), so group_size must be given")
    if group_size < 2:
        raise ValueError(f"group size G must be >= 2; got group_size={group_size}")
    if x.shape[0] % group_size:
        raise ValueError(
            f"batch of {x.shape[0]} rows is not a multiple of group_size={group_size}: "
            "a group (the G responses of one query) must not be split across micro-batches"
        )
    return x.view(-1, group_size)


def group_advantages(
    rewards: torch.Tensor, group_size: int, *, scale: bool = False, eps: float = 1e-4
) -> torch.Tensor:
    """Group-centred advantages ``A_i = R_i - mean_group(R)``, optionally divided by the group std.

    ``rewards``: (B,) float, B a multiple of ``group_size``; consecutive rows form one group.
    Returns (B,) in the rewards' dtype. ``scale=True`` is GRPO's ``(R - mean) / (std + eps)``
    (population std over the group, as TRL's ``scale_rewards="group"`` uses the sample std; the
    difference is a constant factor per G).
    """
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards contain non-finite values (NaN or inf)")
    r = _as_groups(rewards, group_size, "rewards")
    a = r - r.mean(dim=1, keepdim=True)
    if scale:
        a = a / (r.std(dim=1, keepdim=True) + eps)
    return a.reshape(-1)


def tilt_kl(adv: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """``KL(w || uniform)`` for ``w ∝ exp(A / lam)`` per query. adv (Q, G), lam (Q,) > 0 -> (Q,)."""
    z = adv / lam.unsqueeze(1)
    logw = z - torch.logsumexp(z, dim=1, keepdim=True)
    return (logw.exp() * logw).sum(1) + math.log(adv.shape[1])


def dual_objective(adv: torch.Tensor, lam: torch.Tensor, delta: float) -> torch.Tensor:
    """``g(lam) = lam*delta + lam*log mean_i exp(A_i/lam)`` per query; adv (Q, G), lam (Q,) -> (Q,)."""
    z = adv / lam.unsqueeze(1)
    return lam * delta + lam * (torch.logsumexp(z, dim=1) - math.log(adv.shape[1]))


def solve_dual(
    adv: torch.Tensor,
    delta: float,
    group_size: int | None = None,
    *,
    iters: int = 8,
    bisect: int = 0,
    bracket: float = 1e6,
    damp: float = 2.0,
) -> torch.Tensor:
    """Per-query optimal dual ``lambda_x`` of the KL trust region of radius ``delta`` (nats).

    ``adv``: (Q, G) advantages, or (B,) with ``group_size`` (consecutive rows form a group).
    Returns (Q,) ``lambda`` in ``adv.dtype`` (solved in float64), >= 0, detached.

    Solves ``KL(w_lambda || uniform) = delta`` in ``u = log lambda`` with the advantages scaled to
    spread 1 (``s`` = the query's max - min). The bracket is ``[-log bracket, u_hi]`` with
    ``u_hi = -log(8 delta) / 2``: by Hoeffding's lemma a tilt of spread-1 values has
    ``KL <= 1 / (8 lambda^2)``, so the root lies at or below it. ``bisect`` optional bisection
    steps (0 by default; 30 was the earlier default), then ``iters`` safeguarded Newton steps on
    ``log KL - log delta`` (``d KL / du = -Var_w(A/lambda)``) from the small-KL moment start
    ``lambda_0 = sd(A) / sqrt(2 delta)``, each step at most ``damp`` in ``u`` and replaced by the
    bracket's midpoint when it would leave it. The default 8 steps reach 1e-9 relative of a
    200-step bisection on Gaussian, binary, one-outlier and Student-t groups for delta 0.01-1
    (tested; 6 leave 2 of 256 Gaussian groups at 2e-6 at delta = 1). Fixed work, no host sync. ``lambda = 0`` where the constraint cannot bind (``delta >= KL(lambda -> 0) =
    log(G / n_max)``, which includes equal rewards).
    """
    if not (isinstance(delta, (int, float)) and math.isfinite(delta) and delta > 0):
        raise ValueError(
            f"delta (trust-region radius, nats) must be a finite number > 0; got {delta!r}"
        )
    if iters < 0 or bisect < 0 or iters + bisect < 1:
        raise ValueError(
            f"need iters, bisect >= 0 and some steps; got iters={iters}, bisect={bisect}"
        )
    if not damp > 0:
        raise ValueError(f"damp (largest Newton step in log lambda) must be > 0; got {damp!r}")
    a = _as_groups(adv.detach(), group_size, "adv").to(torch.float64)
    if not torch.isfinite(a).all():
        raise ValueError("advantages contain non-finite values (NaN or inf)")
    spread = a.max(1).values - a.min(1).values
    s = spread.clamp_min(torch.finfo(torch.float64).tiny)
    an = a / s.unsqueeze(1)  # spread 1 (or 0)
    big = math.log(bracket)
    lo = torch.full_like(s, -big)
    hi = torch.full_like(s, min(big, -0.5 * math.log(8.0 * delta)))
    logg = math.log(a.shape[1])
    for _ in range(bisect):
        mid = 0.5 * (lo + hi)
        z = an / mid.exp().unsqueeze(1)
        logw = z - torch.logsumexp(z, dim=1, keepdim=True)
        binding = (logw.exp() * logw).sum(1) + logg > delta  # KL too large -> lambda must grow
        lo = torch.where(binding, mid, lo)
        hi = torch.where(binding, hi, mid)
    sd = an.std(1, unbiased=False).clamp_min(torch.finfo(torch.float64).tiny)
    start = (sd / math.sqrt(2.0 * delta)).log()
    u = start.clamp(min=lo, max=hi) if bisect == 0 else 0.5 * (lo + hi)
    log_delta = math.log(delta)
    for _ in range(iters):
        z = an * torch.exp(-u).unsqueeze(1)
        lse = torch.logsumexp(z, dim=1)
        w = torch.exp(z - lse.unsqueeze(1))
        ez = (w * z).sum(1)
        kl = ez - lse + logg  # sum w log w + log G, with log w = z - lse (fewer kernels)
        binding = kl > delta  # KL too large -> the root is above u
        lo = torch.where(binding, u, lo)
        hi = torch.where(binding, hi, u)
        d = z - ez.unsqueeze(1)
        var = (w * d * d).sum(1)
        # Newton on log KL: (log KL)' = -var / KL
        step = (kl.clamp_min(1e-300).log() - log_delta) * kl / var.clamp_min(1e-300)
        step = torch.nan_to_num(step, nan=0.0, posinf=0.0, neginf=0.0).clamp_(-damp, damp)
        nxt = u + step
        inside = (nxt >= lo) & (nxt <= hi)  # inclusive: a converged u sits on a bracket end
        u = torch.where(inside, nxt, 0.5 * (lo + hi))
    lam = u.exp() * s
    # KL(lambda -> 0) = log(G / n_max): at or under delta the constraint never binds.
    top = (an >= an.max(1, keepdim=True).values - 1e-12).sum(1).to(torch.float64)
    kl0 = math.log(a.shape[1]) - top.log()
    lam = torch.where((spread > 0) & (kl0 > delta), lam, torch.zeros_like(lam))
    return lam.to(adv.dtype)
