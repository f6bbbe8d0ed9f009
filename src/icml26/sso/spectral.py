"""The linear algebra of the Spectral Sphere Optimizer, as pure batched functions.

Every function works on a batch of matrices ``(B, m, n)`` (a 2-D input is a batch of one where
noted) so that all atomic matrices of one shape are handled by one set of matmuls.

- :func:`msign` — the polar factor ``U Vᵀ`` of ``X = U S Vᵀ`` by Newton–Schulz with the 8-step
  *Polar Express* coefficient schedule (Amsel et al., 2025), after Frobenius normalization, on the
  wide orientation. This is the ``msign`` of the SSO paper (Xie et al., 2026, Alg. 1).
- :func:`power_iteration` — top singular triplet ``(σ, u, v)``, warm-started from a cached ``v``.
- :func:`solve_lambda` — the root ``λ*`` of ``h(λ) = ⟨Θ, msign(M̂ + λΘ)⟩`` (the tangency condition of
  the paper's steepest descent on the spectral sphere, eq. "h(λ)=0"), by bracketing from the
  previous step's λ and bisection, batched over matrices.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = [
    "POLAR_EXPRESS",
    "msign",
    "msign_exact",
    "power_iteration",
    "solve_lambda",
    "LambdaSolution",
]

# Polar Express, degree 5, l = 1e-3 (Amsel, Persson, Musco, Gower 2025, Alg. 1): (a, b, c) of
# p(x) = a x + b x^3 + c x^5 per iteration. All but the last are divided by the safety factor
# 1.01 (a / 1.01, b / 1.01^3, c / 1.01^5) as in that paper, for round-off headroom.
_PE_RAW = (
    (8.28721201814563, -23.595886519098837, 17.300387312530933),
    (4.107059111542203, -2.9478499167379106, 0.5448431082926601),
    (3.9486908534822946, -2.908902115962949, 0.5518191394370137),
    (3.3184196573706015, -2.488488024314874, 0.51004894012372),
    (2.300652019954817, -1.6689039845747493, 0.4188073119525673),
    (1.891301407787398, -1.2679958271945868, 0.37680408948524835),
    (1.8750014808534479, -1.2500016453999487, 0.3750001645474248),
    (1.875, -1.25, 0.375),
)
POLAR_EXPRESS: tuple[tuple[float, float, float], ...] = tuple(
    (a / 1.01, b / 1.01**3, c / 1.01**5) for a, b, c in _PE_RAW[:-1]
) + (_PE_RAW[-1],)


def msign(x: torch.Tensor, steps: int = 8, *, dtype: torch.dtype | None = None,
          eps: float = 1e-7) -> torch.Tensor:
    """Approximate polar factor ``U Vᵀ`` of each matrix of ``x``; shape and dtype of ``x``.

    ``x``: ``(..., m, n)``. Computed in ``dtype`` (default: float32, or float64 for float64 input).
    Steps beyond the 8 coefficients of :data:`POLAR_EXPRESS` repeat the last, which is the
    fixed-point-preserving (1.875, -1.25, 0.375) quintic. For an input whose singular values after
    Frobenius normalization lie in [1e-3, 1], 8 steps give singular values within about 1e-2 of 1
    (the schedule's design bound); smaller singular values are pushed up but not all the way.
    """
    if x.ndim < 2:
        raise ValueError(f"msign needs a matrix (..., m, n); got shape {tuple(x.shape)}")
    if steps < 1:
        raise ValueError(f"msign steps must be >= 1; got {steps}")
    work = dtype or (torch.float64 if x.dtype == torch.float64 else torch.float32)
    y = x.to(work)
    tall = y.size(-2) > y.size(-1)
    if tall:
        y = y.mT  # wide: the Gram matrix y yᵀ is the smaller one
    norm = torch.linalg.matrix_norm(y, ord="fro", keepdim=True)
    y = y / (norm * 1.01 + eps)
    for i in range(steps):
        a, b, c = POLAR_EXPRESS[min(i, len(POLAR_EXPRESS) - 1)]
        gram = y @ y.mT  # (..., m, m)
        poly = b * gram + c * (gram @ gram)
        y = a * y + poly @ y
    if tall:
        y = y.mT
    return y.to(x.dtype)


def msign_exact(x: torch.Tensor) -> torch.Tensor:
    """The exact polar factor ``U Vᵀ`` by SVD in float64 (the test reference); dtype of ``x``."""
    u, _, vh = torch.linalg.svd(x.double(), full_matrices=False)
    return (u @ vh).to(x.dtype)


def power_iteration(
    w: torch.Tensor, v0: torch.Tensor | None = None, steps: int = 5, eps: float = 1e-30
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top singular triplet of each matrix by alternating power iteration.

    ``w``: ``(B, m, n)``; ``v0``: ``(B, n)`` warm start (the previous step's right vector), or
    ``None`` for a fixed deterministic start. Returns ``σ (B,)``, ``u (B, m)``, ``v (B, n)`` in
    float32 (float64 for float64 input), with ``σ = uᵀ W v ≥ 0``. An all-zero matrix gives σ = 0.
    """
    work = torch.float64 if w.dtype == torch.float64 else torch.float32
    a = w.to(work)
    if v0 is None:
        n = a.size(-1)
        # A fixed start with no symmetry (ones can be orthogonal to v₁ for structured W).
        v = 1.0 + torch.arange(n, dtype=work, device=a.device).mul_(0.61803398875).remainder_(1.0)
        v = v.expand(a.size(0), n)
    else:
        v = v0.to(work)
    v = v / v.norm(dim=-1, keepdim=True).clamp_min(eps)
    u = torch.zeros(a.shape[:-1], dtype=work, device=a.device)
    for _ in range(max(steps, 1)):
        u = (a @ v.unsqueeze(-1)).squeeze(-1)
        u = u / u.norm(dim=-1, keepdim=True).clamp_min(eps)
        v = (a.mT @ u.unsqueeze(-1)).squeeze(-1)
        v = v / v.norm(dim=-1, keepdim=True).clamp_min(eps)
    sigma = (u.unsqueeze(-2) @ a @ v.unsqueeze(-1)).reshape(-1)
    return sigma, u, v


def tangent_inner(u: torch.Tensor, phi: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``⟨u vᵀ, Φ⟩ = uᵀ Φ v`` per matrix: ``u (B, m)``, ``phi (B, m, n)``, ``v (B, n)`` -> ``(B,)``."""
    return (u.unsqueeze(-2) @ phi.to(u.dtype) @ v.unsqueeze(-1)).reshape(-1)


@dataclass
class LambdaSolution:
    """Result of :func:`solve_lambda` for a batch of B matrices.

    ``lam (B,)`` the multipliers; ``phi (B, m, n)`` = msign(M̂ + λΘ); ``h (B,)`` the tangency
    residual ⟨Θ, Φ⟩; ``iterations`` the h-evaluations (msign calls) made, the warm start included;
    ``converged (B,)`` whether |h| ≤ tol was reached; ``slope (B,)`` the secant slope of h
    through the last two points evaluated (NaN where none was measured): the next step's
    ``slope0``.
    """

    lam: torch.Tensor
    phi: torch.Tensor
    h: torch.Tensor
    iterations: int
    converged: torch.Tensor
    slope: torch.Tensor | None = None


def solve_lambda(
    g: torch.Tensor,
    u: torch.Tensor,
    v: torch.Tensor,
    lam0: torch.Tensor,
    *,
    tol: float = 2e-4,
    max_iter: int = 20,
    max_expand: int = 10,
    init_step: float = 1e-3,
    msign_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
    early_exit: bool = True,
    method: str = "bisect",
    slope0: torch.Tensor | None = None,
) -> LambdaSolution:
    """Root of ``h(λ) = ⟨Θ, msign(G + λΘ)⟩`` per matrix, ``Θ = u vᵀ`` (SSO, Alg. 1 lines 5-6).

    ``g (B, m, n)`` the normalized momentum M̂; ``u (B, m)``, ``v (B, n)`` the top singular pair of
    W; ``lam0 (B,)`` the warm start (the previous step's λ). ``h`` is non-decreasing in λ, so:

    1. evaluate ``h(λ₀)``; accept when ``|h| ≤ tol``;
    2. *bracket*: step away from λ₀ against the sign of ``h(λ₀)`` by ``init_step·2ᵏ``,
       ``k < max_expand``, until the sign flips (or ``|h| ≤ tol``). If it never flips, the far
       end becomes ``∓2·sqrt(min(m, n))·‖M̂‖_F`` ≥ 2‖M̂‖_*, beyond which the paper shows the sign of
       ``h`` is fixed;
    3. shrink the bracket at most ``max_iter`` times until ``|h| ≤ tol``: ``method="bisect"`` (the
       paper) halves it; ``method="illinois"`` takes the Illinois false-position point (same
       bracket, same stopping rule, usually far fewer msign calls).

    ``slope0 (B,)`` (optional) seeds step 2 with a secant step: the first probe is the Newton
    point ``λ₀ − h(λ₀)/slope0`` and the expansion continues from ``|h(λ₀)/slope0|·2ᵏ`` instead of
    ``init_step·2ᵏ``; matrices whose slope0 is not finite and > 0 use ``init_step``. Pass the
    previous step's :attr:`LambdaSolution.slope`: λ* and h' drift slowly between steps, so the
    probe usually brackets (or hits) the root at once. The bracket and the stopping rule are
    unchanged, so the root is the same to within ``tol``.

    Matrices that never reach ``tol`` keep the evaluated λ with the smallest ``|h|``. With
    ``early_exit`` (default) only unfinished matrices are evaluated and the loop stops once all
    are done (one host sync per iteration); with ``early_exit=False`` every evaluation covers the
    whole batch and the count is fixed at ``1 + max_expand + max_iter`` msign calls, no host sync.
    """
    if method not in ("bisect", "illinois"):
        raise ValueError(f"method must be 'bisect' or 'illinois'; got {method!r}")
    msign_fn = msign_fn or msign
    work = u.dtype
    theta = u.unsqueeze(-1) * v.unsqueeze(-2)  # Θ = u vᵀ, (B, m, n)
    gw = g.to(work)
    lam0 = lam0.to(work)

    def h_at(lam: torch.Tensor, idx: torch.Tensor | None):
        if idx is None:
            phi = msign_fn(gw + lam.view(-1, 1, 1) * theta)
            return tangent_inner(u, phi, v), phi
        phi = msign_fn(gw[idx] + lam[idx].view(-1, 1, 1) * theta[idx])
        return tangent_inner(u[idx], phi, v[idx]), phi

    h0, best_phi = h_at(lam0, None)
    evals = 1
    best_h, best_lam = h0.clone(), lam0.clone()
    done = h0.abs() <= tol
    # secant through the last two evaluated points of each matrix: the slope handed to the next
    # step (h is non-decreasing in λ, so a valid slope is finite and > 0)
    prev_lam, prev_h = lam0.clone(), h0.clone()
    slope = torch.full_like(lam0, float("nan"))

    def evaluate(lam: torch.Tensor, mask: torch.Tensor):
        """h at ``lam`` for the matrices in ``mask`` (others: 0); updates the best Φ found."""
        nonlocal best_phi, best_h, best_lam, prev_lam, prev_h, slope
        if early_exit:
            idx = torch.nonzero(mask).flatten()
            h_sub, phi_sub = h_at(lam, idx)
            hc = torch.zeros_like(lam)
            hc[idx] = h_sub
            better = h_sub.abs() < best_h[idx].abs()
            sel = idx[better]
            best_phi[sel] = phi_sub[better].to(best_phi.dtype)
        else:
            hc, phi = h_at(lam, None)
            better_all = mask & (hc.abs() < best_h.abs())
            best_phi = torch.where(better_all.view(-1, 1, 1), phi, best_phi)
        better_all = mask & (hc.abs() < best_h.abs())
        best_h = torch.where(better_all, hc, best_h)
        best_lam = torch.where(better_all, lam, best_lam)
        dl = lam - prev_lam
        moved = mask & (dl != 0)
        sec = (hc - prev_h) / torch.where(moved, dl, torch.ones_like(dl))
        slope = torch.where(moved & torch.isfinite(sec) & (sec > 0), sec, slope)
        prev_lam = torch.where(mask, lam, prev_lam)
        prev_h = torch.where(mask, hc, prev_h)
        return hc

    up = h0 <= 0  # the root lies above λ₀
    sgn = torch.where(up, 1.0, -1.0).to(work)
    lo, hi = lam0.clone(), lam0.clone()
    hlo, hhi = h0.clone(), h0.clone()
    bracketed = done.clone()
    base = torch.full_like(lam0, init_step)
    if slope0 is not None:
        s0 = slope0.to(work)
        step0 = h0.abs() / torch.where(s0 > 0, s0, torch.ones_like(s0))
        ok0 = torch.isfinite(s0) & (s0 > 0) & torch.isfinite(step0) & (step0 > 0)
        base = torch.where(ok0, step0, base)
    for k in range(max_expand):
        mask = ~done & ~bracketed
        if early_exit and not bool(mask.any()):
            break
        cand = lam0 + sgn * (base * 2.0**k)
        hc = evaluate(cand, mask)
        evals += 1
        ok = mask & (hc.abs() <= tol)
        crossed = mask & ~ok & (hc * sgn >= 0)
        same = mask & ~ok & ~crossed
        done |= ok
        # crossing: cand is the far end; same side: cand is the new near end
        set_hi = (crossed & up) | (same & ~up)
        set_lo = (crossed & ~up) | (same & up)
        hi, hhi = torch.where(set_hi, cand, hi), torch.where(set_hi, hc, hhi)
        lo, hlo = torch.where(set_lo, cand, lo), torch.where(set_lo, hc, hlo)
        bracketed |= crossed
    # Fallback far end: ‖M̂‖_* ≤ sqrt(r)·‖M̂‖_F, so |λ| = 2·sqrt(r)·‖M̂‖_F brackets the root.
    r = min(g.size(-2), g.size(-1))
    bound = 2.0 * math.sqrt(r) * torch.linalg.matrix_norm(gw, ord="fro")
    need = ~done & ~bracketed
    hi, hhi = torch.where(need & up, bound, hi), torch.where(need & up, 1.0, hhi)
    lo, hlo = torch.where(need & ~up, -bound, lo), torch.where(need & ~up, -1.0, hlo)
    last = torch.zeros_like(lo)  # Illinois: -1 if lo moved last, +1 if hi moved last
    for _ in range(max_iter):
        mask = ~done
        if early_exit and not bool(mask.any()):
            break
        mid = 0.5 * (lo + hi)
        if method == "illinois":
            den = hhi - hlo
            fp = lo - hlo * (hi - lo) / torch.where(den > 0, den, torch.ones_like(den))
            good = (den > 0) & (fp > lo) & (fp < hi)
            mid = torch.where(good, fp, mid)
        hc = evaluate(mid, mask)
        evals += 1
        ok = mask & (hc.abs() <= tol)
        done |= ok
        go_up = mask & ~ok & (hc < 0)  # root above mid
        go_dn = mask & ~ok & (hc > 0)
        if method == "illinois":  # halve the stale end's h when one end moves twice in a row
            hhi = torch.where(go_up & (last < 0), 0.5 * hhi, hhi)
            hlo = torch.where(go_dn & (last > 0), 0.5 * hlo, hlo)
        lo, hlo = torch.where(go_up, mid, lo), torch.where(go_up, hc, hlo)
        hi, hhi = torch.where(go_dn, mid, hi), torch.where(go_dn, hc, hhi)
        last = torch.where(go_up, -1.0, torch.where(go_dn, 1.0, last))
    converged = best_h.abs() <= tol
    if slope0 is not None:  # matrices never moved (converged at λ₀) keep the slope they had
        slope = torch.where(torch.isfinite(slope), slope, slope0.to(work))
    return LambdaSolution(best_lam, best_phi, best_h, evals, converged, slope)
