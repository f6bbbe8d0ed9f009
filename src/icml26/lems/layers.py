"""Which modules of an HF causal LM get compressed, and how a low-rank pair replaces one.

A *target layer* is an ``nn.Linear`` (or HF GPT-2 ``Conv1D``, whose weight is stored transposed)
whose name contains none of :data:`EXCLUDE` and which is not the output embedding. Every target
has a dense weight ``W`` of shape ``(n_out, n_in)`` (:func:`dense_weight`), a block index (its
position in the model's list of decoder blocks) and, once compressed, becomes
``Sequential(Linear(n_in, r, bias=False), Linear(r, n_out, bias))`` (:func:`low_rank_module`).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import nn

from icml26.core.errors import UserError

__all__ = [
    "EXCLUDE",
    "TargetLayer",
    "is_conv1d",
    "target_layers",
    "dense_weight",
    "block_list",
    "low_rank_module",
    "replace_module",
    "swapped_weights",
]

EXCLUDE = ("lm_head", "embed", "wte", "wpe", "norm", "ln_", "head", "score", "classifier")
_QUANTIZED_HINTS = ("8bit", "4bit", "quant", "qlinear", "fp8", "int8", "int4", "gptq", "awq", "bnb")


def is_conv1d(module: nn.Module) -> bool:
    return type(module).__name__ == "Conv1D" and hasattr(module, "nf") and hasattr(module, "nx")


@dataclass(frozen=True)
class TargetLayer:
    """One compressible layer: qualified name, shape of its dense weight (n_out, n_in), block."""

    name: str
    n_in: int
    n_out: int
    block: int

    @property
    def params(self) -> int:
        """Dense weight parameters n_in * n_out (the bias is never counted: it is kept)."""
        return self.n_in * self.n_out

    @property
    def r_eq(self) -> float:
        """Equivalent rank n_in n_out / (n_in + n_out): a rank-r_eq pair costs as much as W."""
        return self.n_in * self.n_out / (self.n_in + self.n_out)


def dense_weight(module: nn.Module) -> torch.Tensor:
    """The weight as ``(n_out, n_in)`` (a view; ``Conv1D`` stores ``(n_in, n_out)``)."""
    if is_conv1d(module):
        return module.weight.t()
    return module.weight


def _refuse_quantized(name: str, module: nn.Module) -> None:
    kind = type(module).__name__
    low = kind.lower()
    weight = getattr(module, "weight", None)
    if any(h in low for h in _QUANTIZED_HINTS) or (
        isinstance(weight, torch.Tensor) and not weight.dtype.is_floating_point
    ):
        raise UserError(
            f"module {name!r} is a quantized layer ({kind}); low-rank compression needs float "
            "weights: load the model unquantized (float32/bfloat16) first"
        )


def block_list(model: nn.Module) -> tuple[str, nn.ModuleList]:
    """The model's list of decoder blocks: the longest ``nn.ModuleList`` holding linear layers.

    Returns ``(qualified name, module list)``; raises UserError when there is none.
    """
    best: tuple[str, nn.ModuleList] | None = None
    for name, mod in model.named_modules():
        if isinstance(mod, nn.ModuleList) and len(mod) > 0:
            has_linear = any(isinstance(m, nn.Linear) or is_conv1d(m) for m in mod[0].modules())
            if has_linear and (best is None or len(mod) > len(best[1])):
                best = (name, mod)
    if best is None:
        raise UserError(f"{type(model).__name__}: no list of blocks (nn.ModuleList) with linear layers")
    return best


def target_layers(
    model: nn.Module,
    *,
    blocks: Callable[[int], bool] | None = None,
    exclude: tuple[str, ...] = EXCLUDE,
) -> list[TargetLayer]:
    """The compressible layers of ``model`` in module order.

    ``blocks`` optionally filters by block index (e.g. ``lambda b: b >= 26`` for the last four of
    30). Layers outside the block list (rare) get block -1 and are only kept without a filter.
    Raises UserError when no layer qualifies, listing the module types that were seen.
    """
    out_emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    prefix, blist = block_list(model)
    pat = re.compile(rf"^{re.escape(prefix)}\.(\d+)\.") if prefix else re.compile(r"^(\d+)\.")
    found: list[TargetLayer] = []
    seen_types: set[str] = set()
    for name, mod in model.named_modules():
        seen_types.add(type(mod).__name__)
        _refuse_quantized(name, mod)
        if not (isinstance(mod, nn.Linear) or is_conv1d(mod)) or mod is out_emb:
            continue
        if any(key in name.lower() for key in exclude):
            continue
        m = pat.match(name)
        block = int(m.group(1)) if m else -1
        if blocks is not None and (block < 0 or not blocks(block)):
            continue
        n_out, n_in = dense_weight(mod).shape
        found.append(TargetLayer(name, n_in, n_out, block))
    if not found:
        raise UserError(
            f"{type(model).__name__} has no target layers (nn.Linear/Conv1D outside "
            f"{', '.join(exclude)}); module types seen: {', '.join(sorted(seen_types))}"
        )
    return found


def low_rank_module(
    left: torch.Tensor, right: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype
) -> nn.Sequential:
    """``Sequential(Linear(n_in, r, bias=False), Linear(r, n_out, bias))`` with W ~= left @ right.

    ``left``: (n_out, r), ``right``: (r, n_in). The bias, if any, stays on the second linear.
    """
    r, n_in = right.shape
    n_out = left.shape[0]
    first = nn.Linear(n_in, r, bias=False, device=right.device, dtype=dtype)
    second = nn.Linear(r, n_out, bias=bias is not None, device=left.device, dtype=dtype)
    with torch.no_grad():
        first.weight.copy_(right.to(dtype))
        second.weight.copy_(left.to(dtype))
        if bias is not None:
            second.bias.copy_(bias.to(dtype))
    return nn.Sequential(first, second)


def replace_module(model: nn.Module, name: str, new: nn.Module) -> nn.Module:
    """Put ``new`` at qualified ``name``; returns the module it replaced."""
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    old = getattr(parent, child)
    setattr(parent, child, new)
    return old


@contextlib.contextmanager
def swapped_weights(model: nn.Module, weights: dict[str, torch.Tensor]) -> Iterator[None]:
    """Temporarily overwrite dense weights (each ``(n_out, n_in)``) in place; restored on exit.

    Used by the rank search to score a candidate without building low-rank modules (the function
    computed is the same: ``x (L R)^T``).
    """
    saved: dict[str, torch.Tensor] = {}
    try:
        with torch.no_grad():
            for name, w in weights.items():
                dw = dense_weight(model.get_submodule(name))
                saved[name] = dw.detach().clone()
                dw.copy_(w.to(dw.dtype))
        yield
    finally:
        with torch.no_grad():
            for name, w in saved.items():
                dense_weight(model.get_submodule(name)).copy_(w)
