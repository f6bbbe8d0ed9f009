"""Transform baselines beyond the fixed maps of :mod:`icml26.cat.transforms`.

- **Smoothing then rotation** (SmoothQuant scales followed by a Hadamard/rotation; the
  "diagonal + orthogonal" family that CAT's ``T = Q P^{1/2}`` generalizes):
  ``T = R diag(1/s)`` with SmoothQuant's ``s`` and a rotation R (:func:`smooth_then_rotate`).
- **FlatQuant-lite** (after Sun et al., "FlatQuant", 2025): a learned, invertible affine input
  transform per linear input group, here block-diagonal with CAT's block size (the same online
  cost as block CAT), initialized at a randomized Hadamard and trained layer by layer on the
  calibration tokens to minimize the group's W/A fake-quantized output error, with a
  straight-through estimator for rounding (:func:`learn_affine_transform`). FlatQuant proper
  uses Kronecker-factored transforms, learnable clipping and block-output losses over epochs;
  those are not reproduced (docs/cat.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from icml26.cat.quant import quantize_sym
from icml26.cat.transforms import BlockTransform
from icml26.core.hooks import forward_with_pre_hooks

__all__ = ["smooth_then_rotate", "learn_affine_transform", "collect_input_samples"]


def smooth_then_rotate(smooth: BlockTransform, rotation: BlockTransform) -> BlockTransform:
    """``T = R diag(1/s)``: SmoothQuant's diagonal ``smooth`` (b = 1) first, then ``rotation``
    (block-diagonal, any block). Block k of T is ``R_k diag(1/s)_k``."""
    if smooth.block != 1:
        raise ValueError(f"smooth must be diagonal (block 1); got block {smooth.block}")
    if smooth.dim != rotation.dim:
        raise ValueError(f"widths differ: smoothing {smooth.dim}, rotation {rotation.dim}")
    n, b, _ = rotation.blocks.shape
    diag = smooth.blocks.reshape(n, 1, b).to(rotation.blocks.device)  # scales R_k's columns
    return BlockTransform(rotation.blocks * diag, kind=f"{smooth.kind}+{rotation.kind}")


@torch.no_grad()
def collect_input_samples(
    model: torch.nn.Module,
    batches: Sequence[torch.Tensor],
    names: Sequence[str],
    per_batch: int,
    seed: int = 0,
    progress=None,
) -> dict[str, torch.Tensor]:
    """``{name: (len(batches) * per_batch, d) float32}``: random input tokens (rows) of each
    named linear, ``per_batch`` drawn without replacement from each calibration batch."""
    mods = dict(model.named_modules())
    out: dict[str, list[torch.Tensor]] = {n: [] for n in names}
    g = torch.Generator().manual_seed(seed)

    def hook(name):
        def f(mod, args):
            x = args[0].detach().reshape(-1, args[0].shape[-1])
            idx = torch.randperm(x.shape[0], generator=g)[: min(per_batch, x.shape[0])]
            out[name].append(x[idx.to(x.device)].to("cpu", torch.float32))

        return f

    forward_with_pre_hooks(
        model,
        list(batches),
        {mods[n]: hook(n) for n in names},
        progress=progress,
        description="capture",
    )
    return {n: torch.cat(v) for n, v in out.items()}


def _ste(x: torch.Tensor, bits: int, granularity: str) -> torch.Tensor:
    return x + (quantize_sym(x, bits, granularity) - x).detach()


def learn_affine_transform(
    weights: Iterable[torch.Tensor],
    x: torch.Tensor,
    init: BlockTransform,
    w_bits: int = 4,
    a_bits: int = 4,
    *,
    steps: int = 60,
    lr: float = 2e-3,
    layer: str = "layer",
) -> BlockTransform:
    """Learn block-diagonal ``T`` (``init``'s block size) minimizing the fake-quantized output
    error ``mean ||x W^T - Q_a(x T^T) Q_w(W T^{-1})^T||^2 / mean ||x W^T||^2`` over the linears
    that read ``x`` (N, d), with Adam (``lr``) for ``steps`` steps; rounding passes gradients
    straight through (scales are not learned). Returns the best T seen (lowest loss, the
    initial one included), kind ``"flatquant-lite-b{b}"``. Trains with gradients on even when
    called under ``torch.no_grad()`` (e.g. by a lazy arm inside :func:`layer_sqnr`)."""
    with torch.enable_grad():
        return _learn_affine(weights, x, init, w_bits, a_bits, steps, lr, layer)


def _learn_affine(weights, x, init, w_bits, a_bits, steps, lr, layer) -> BlockTransform:
    w = torch.cat([wi.detach().to("cpu", torch.float32) for wi in weights])  # (M, d)
    x = x.to(torch.float32)
    n, b, _ = init.blocks.shape
    if x.shape[1] != n * b or w.shape[1] != n * b:
        raise ValueError(f"{layer}: inputs {x.shape[1]}, weights {w.shape[1]}, transform {n * b}")
    y = x @ w.T  # (N, M) full-precision target
    ref = y.pow(2).mean()
    blocks = init.blocks.to("cpu", torch.float32).clone().requires_grad_(True)
    opt = torch.optim.Adam([blocks], lr=lr)
    best = (float("inf"), init.blocks.clone())
    for _ in range(steps + 1):
        inv = torch.linalg.inv(blocks)  # (n, b, b)
        xt = torch.einsum("tnj,nij->tni", x.reshape(-1, n, b), blocks).reshape(x.shape)
        wt = torch.einsum("mnj,nji->mni", w.reshape(-1, n, b), inv).reshape(w.shape)
        out = _ste(xt, a_bits, "token") @ _ste(wt, w_bits, "channel").T
        loss = (out - y).pow(2).mean() / ref
        value = float(loss.detach())
        if value < best[0]:
            best = (value, blocks.detach().to(torch.float64).clone())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return BlockTransform(best[1], kind=f"flatquant-lite-b{b}")
