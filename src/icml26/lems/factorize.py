"""Whitened truncated SVD of one weight, and of every target layer of a model.

The core (:func:`whitened_svd`): for invertible ``P`` (n_out x n_out) and ``Q`` (n_in x n_in),
take ``M = P W Q = U S V^T`` and keep the full spectrum as

    left  = P^{-1} U S^{1/2}       (n_out, k)
    right = S^{1/2} V^T Q^{-1}     (k, n_in),     k = min(n_out, n_in)

so that ``left[:, :r] @ right[:r]`` is the rank-r solution minimising ``||P (W - W_r) Q||_F``.
The methods differ only in P and Q:

=============  =====================================  ==========================================
method         P                                      Q
=============  =====================================  ==========================================
``svd``        I                                      I
``svd_llm``    I                                      L_A, Cholesky of A (SVD-LLM)
``asvd``       I                                      diag(mean|x|)^0.5 (ASVD, alpha = 0.5)
``fwsvd``      diag(sqrt(row Fisher))                 I (FWSVD)
``kfac``       L_G^T ("transpose", default), L_G      L_A, after shrinkage of A and G
               ("official") or I ("identity": G = I)
=============  =====================================  ==========================================

KFAC's "transpose trap": with G = L_G L_G^T, ``||L_G dW L_A||^2 = tr(dW^T L_G^T L_G dW A)``, which
is *not* the K-FAC error ``tr(dW^T G dW A)``; ``P = L_G^T`` gives exactly the K-FAC error, whose
truncation error is then the Eckart-Young bound ``sum_{i>r} s_i^2``. The official code (and the
paper's figures) use L_G; all three are offered, L_G^T by default. ``"identity"`` drops G (it
is SVD-LLM with KFAC's shrinkage of A), which isolates what the G-whitening adds.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from icml26.lems.layers import TargetLayer, dense_weight

__all__ = [
    "METHODS",
    "LayerFactors",
    "shrink",
    "whitening_factor",
    "whitened_svd",
    "factorize",
]

METHODS = ("kfac", "svd_llm", "svd", "asvd", "fwsvd")
LEFT_FACTORS = ("transpose", "official", "identity")


@dataclass
class LayerFactors:
    """Full-rank factorization of one layer: W ~= left[:, :r] @ right[:r] for any r <= k.

    ``left``: (n_out, k), ``right``: (k, n_in), ``s``: (k,) whitened singular values, descending
    (float32 or float64); ``bias``: the layer's bias or None; ``info``: how whitening went.
    """

    left: torch.Tensor
    right: torch.Tensor
    s: torch.Tensor
    bias: torch.Tensor | None = None
    info: str = ""

    def truncate(self, r: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(left (n_out, r), right (r, n_in))."""
        if not 0 <= r <= self.s.numel():
            raise ValueError(f"rank must be in [0, {self.s.numel()}]; got {r}")
        return self.left[:, :r], self.right[:r]

    def weight(self, r: int) -> torch.Tensor:
        left, right = self.truncate(r)
        return left @ right


def shrink(c: torch.Tensor, alpha: float) -> torch.Tensor:
    """Ledoit-Wolf-style shrinkage ``(1 - alpha) C + alpha mean(diag C) I``."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"shrinkage alpha must be in [0, 1]; got {alpha}")
    if alpha == 0:
        return c
    eye = torch.eye(c.shape[0], dtype=c.dtype, device=c.device)
    return (1 - alpha) * c + alpha * c.diagonal().mean() * eye


def whitening_factor(
    c: torch.Tensor, *, retries: int = 3, eps: float = 1e-6
) -> tuple[torch.Tensor, str]:
    """A factor ``L`` with ``L L^T = C`` (up to the shifts), for symmetric PSD ``C`` (n, n).

    Cholesky first; on failure shift the diagonal by ``-lambda_min + eps * mean(diag)`` and retry
    (``retries`` times); then eigen-whitening ``Q diag(sqrt(max(lambda, 0) + eps mean(diag)))``,
    which never fails. Returns ``(L, info)`` with info "cholesky", "cholesky+shift k" or "eigh".
    """
    c = 0.5 * (c + c.T)
    scale = float(c.diagonal().mean().abs()) or 1.0
    work = c
    for attempt in range(retries + 1):
        chol, err = torch.linalg.cholesky_ex(work)
        if int(err) == 0 and torch.isfinite(chol).all():
            return chol, "cholesky" if attempt == 0 else f"cholesky+shift {attempt}"
        if attempt == retries:
            break
        lam_min = float(torch.linalg.eigvalsh(work)[0])
        shift = max(-lam_min, 0.0) + eps * scale
        work = work + shift * torch.eye(c.shape[0], dtype=c.dtype, device=c.device)
    lam, vec = torch.linalg.eigh(c)
    return vec * (lam.clamp(min=0) + eps * scale).sqrt(), "eigh"


def _apply_inv_left(p: torch.Tensor | None, x: torch.Tensor, triangular: str | None) -> torch.Tensor:
    """P^{-1} x for P None (identity), a vector (diagonal) or a matrix."""
    if p is None:
        return x
    if p.dim() == 1:
        return x / p.unsqueeze(1)
    if triangular is not None:
        return torch.linalg.solve_triangular(p, x, upper=triangular == "upper")
    return torch.linalg.solve(p, x)


def whitened_svd(
    w: torch.Tensor,
    p: torch.Tensor | None = None,
    q: torch.Tensor | None = None,
    *,
    p_tri: str | None = None,
    q_tri: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """SVD of ``P W Q`` split into full-rank ``(left, right, s)`` (see the module docstring).

    ``w``: (n_out, n_in); ``p``: None, (n_out,) diagonal or (n_out, n_out); ``q``: None, (n_in,)
    or (n_in, n_in); ``p_tri``/``q_tri``: "lower"/"upper" when the factor is triangular (faster,
    more accurate solves). Computed in ``w``'s dtype.
    """
    m = w
    if p is not None:
        m = p.unsqueeze(1) * m if p.dim() == 1 else p @ m
    if q is not None:
        m = m * q.unsqueeze(0) if q.dim() == 1 else m @ q
    u, s, vh = torch.linalg.svd(m, full_matrices=False)
    root = s.clamp(min=0).sqrt()
    left = _apply_inv_left(p, u * root, p_tri)
    # right = S^{1/2} V^T Q^{-1}  <=>  right^T = Q^{-T} V S^{1/2}
    vs = vh.T * root
    if q is None:
        right = vs.T
    elif q.dim() == 1:
        right = (vs / q.unsqueeze(1)).T
    elif q_tri is not None:
        flip = {"lower": "upper", "upper": "lower"}[q_tri]
        right = torch.linalg.solve_triangular(q.T, vs, upper=flip == "upper").T
    else:
        right = torch.linalg.solve(q.T, vs).T
    return left, right, s


def _kfac_pq(a, g, left_factor, shrink_a, shrink_g):
    la, ia = whitening_factor(shrink(a, shrink_a))
    tri_a = "lower" if ia.startswith("cholesky") else None
    if left_factor == "identity":
        return None, la, None, tri_a, f"A:{ia} G:I"
    lg, ig = whitening_factor(shrink(g, shrink_g))
    tri_g = "lower" if ig.startswith("cholesky") else None
    if left_factor == "transpose":
        lg = lg.T
        tri_g = "upper" if tri_g else None
    return lg, la, tri_g, tri_a, f"A:{ia} G:{ig}"


def factorize_weight(
    w: torch.Tensor,
    *,
    method: str,
    a: torch.Tensor | None = None,
    g: torch.Tensor | None = None,
    act_abs: torch.Tensor | None = None,
    row_fisher: torch.Tensor | None = None,
    left_factor: str = "transpose",
    shrink_a: float = 0.1,
    shrink_g: float = 0.3,
    asvd_alpha: float = 0.5,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, str]:
    """One layer: ``(left, right, s, info)`` for ``method`` in :data:`METHODS`.

    Inputs in the compute dtype: ``w`` (n_out, n_in), ``a`` (n_in, n_in), ``g`` (n_out, n_out),
    ``act_abs`` (n_in,) mean |x|, ``row_fisher`` (n_out,). If the SVD fails, non-finite whitening
    factors are replaced by the identity and the SVD is retried once.
    """
    p = q = None
    p_tri = q_tri = None
    info = ""
    if method == "svd":
        pass
    elif method == "svd_llm":
        q, info = whitening_factor(a)
        q_tri = "lower" if info.startswith("cholesky") else None
    elif method == "asvd":
        q = act_abs.clamp(min=1e-6 * float(act_abs.max()) + 1e-30).pow(asvd_alpha)
    elif method == "fwsvd":
        p = row_fisher.clamp(min=1e-6 * float(row_fisher.max()) + 1e-30).sqrt()
    elif method == "kfac":
        if left_factor not in LEFT_FACTORS:
            raise ValueError(f"left_factor must be one of {', '.join(LEFT_FACTORS)}; got {left_factor!r}")
        p, q, p_tri, q_tri, info = _kfac_pq(a, g, left_factor, shrink_a, shrink_g)
    else:
        raise ValueError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    try:
        left, right, s = whitened_svd(w, p, q, p_tri=p_tri, q_tri=q_tri)
        if not (torch.isfinite(left).all() and torch.isfinite(right).all()):
            raise torch.linalg.LinAlgError("non-finite factors")
    except (RuntimeError, torch.linalg.LinAlgError):
        p = None if p is not None and not torch.isfinite(p).all() else p
        q = None if q is not None and not torch.isfinite(q).all() else q
        left, right, s = whitened_svd(w, p, q, p_tri=p_tri if p is not None else None,
                                      q_tri=q_tri if q is not None else None)
        info += " (svd retried)"
    return left, right, s, info


def factorize(
    model,
    stats=None,
    method: str = "kfac",
    *,
    left_factor: str = "transpose",
    layers: list[TargetLayer] | None = None,
    shrink_a: float = 0.1,
    shrink_g: float = 0.3,
    compute_dtype: torch.dtype = torch.float64,
    store_dtype: torch.dtype = torch.float32,
    progress=None,
) -> dict[str, LayerFactors]:
    """Full-spectrum factorization of every target layer: ``{name: LayerFactors}``.

    ``stats`` (:class:`~icml26.lems.stats.KFACStats`) is needed by every method but ``svd``.
    Work is in ``compute_dtype`` (float64 by default: whitening inverts ill-conditioned
    covariances), results are stored in ``store_dtype`` on the weight's device.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    if left_factor not in LEFT_FACTORS:
        raise ValueError(f"left_factor must be one of {', '.join(LEFT_FACTORS)}; got {left_factor!r}")
    if method != "svd" and stats is None:
        raise ValueError(f"method {method!r} needs calibration statistics (collect_kfac_stats)")
    layers = layers if layers is not None else (stats.layers if stats is not None else None)
    if layers is None:
        from icml26.lems.layers import target_layers

        layers = target_layers(model)
    out: dict[str, LayerFactors] = {}
    it = progress.track(layers, total=len(layers), description=f"factorize ({method})") if progress else layers
    for layer in it:
        mod = model.get_submodule(layer.name)
        w = dense_weight(mod).detach()
        dev = w.device
        kw = {}
        if stats is not None and method != "svd":
            kw = dict(
                a=stats.input_cov(layer.name).to(dev, compute_dtype) / max(stats.tokens_a, 1),
                g=stats.G[layer.name].to(dev, compute_dtype) / max(stats.tokens_g, 1),
                act_abs=stats.act_abs[layer.name].to(dev, compute_dtype) / max(stats.tokens_a, 1),
                row_fisher=stats.row_fisher[layer.name].to(dev, compute_dtype),
            )
        left, right, s, info = factorize_weight(
            w.to(compute_dtype), method=method, left_factor=left_factor,
            shrink_a=shrink_a, shrink_g=shrink_g, **kw)
        bias = getattr(mod, "bias", None)
        out[layer.name] = LayerFactors(
            left.to(store_dtype).contiguous(), right.to(store_dtype).contiguous(),
            s.to(store_dtype), None if bias is None else bias.detach().clone(), info)
    return out
