"""Kernel backends for NVIDIA's NVFP4 recipe: Transformer Engine and torchao, behind one switch.

``Quartet2Config.backend``:

- ``"simulate"`` (default, the reference): the bit-exact PyTorch simulation in this package; runs
  on any device.
- ``"te"``: NVIDIA Transformer Engine's ``te.Linear`` under its autocast with the
  ``NVFP4BlockScaling`` recipe (RHT-16 on the wgrad operands, SR on gradients, 16x16 weight tiles).
- ``"torchao"``: torchao's NVFP4 training linear (``NVFP4Linear`` of its NVFP4 training
  prototype: the same recipe in Triton).

Both kernel stacks implement NVIDIA's recipe only; neither has an MS-EDEN backward, so
``recipe="quartet2"`` with a kernel backend is an error that says so (Quartet II's own kernels are
the ``quartet2`` package of IST-DASLab/Quartet-II, CUDA 13, sm100/sm120). NVFP4 tensor-core
GEMMs need a Blackwell GPU (compute capability >= 10.0). :func:`check_backend` raises
:class:`UserError` naming what is missing: the library, CUDA, or the GPU's capability.
"""

from __future__ import annotations

import importlib
import importlib.util

import torch
from torch import nn

from icml26.core.errors import UserError

__all__ = ["BACKENDS", "MIN_CAPABILITY", "check_backend", "kernel_linear"]

BACKENDS = ("simulate", "te", "torchao")
MIN_CAPABILITY = (10, 0)  # NVFP4 tensor cores: Blackwell (sm100, sm120)
_INSTALL = {
    "te": ("transformer_engine", "NVIDIA Transformer Engine (pip install "
           "'transformer-engine[pytorch]', CUDA build)"),
    "torchao": ("torchao", "torchao (pip install torchao, with a CUDA build of torch and triton)"),
}


def check_backend(backend: str, recipe: str = "nvidia", device=None) -> None:
    """Raise :class:`UserError` unless ``backend`` can run ``recipe`` on ``device`` (default: the
    current CUDA device). ``"simulate"`` always can."""
    if backend not in BACKENDS:
        raise ValueError(f"`backend` must be one of {BACKENDS}; got {backend!r}")
    if backend == "simulate":
        return
    if recipe != "nvidia":
        raise UserError(
            f"backend={backend!r} implements NVIDIA's NVFP4 recipe only; recipe={recipe!r} "
            "(MS-EDEN backward) has no kernel there: use backend='simulate', or Quartet II's own "
            "kernels (the `quartet2` package of IST-DASLab/Quartet-II)")
    module, what = _INSTALL[backend]
    if importlib.util.find_spec(module) is None:
        raise UserError(f"backend={backend!r} needs {what}; it is not installed")
    if not torch.cuda.is_available():
        raise UserError(f"backend={backend!r} needs a CUDA GPU; torch.cuda.is_available() is "
                        f"False (torch {torch.__version__})")
    dev = torch.device(device) if device is not None else torch.device("cuda")
    if dev.type != "cuda":
        raise UserError(f"backend={backend!r} runs on CUDA devices; got device {str(dev)!r}")
    cap = torch.cuda.get_device_capability(dev)
    if tuple(cap) < MIN_CAPABILITY:
        raise UserError(
            f"backend={backend!r} needs NVFP4 tensor cores (compute capability >= "
            f"{MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]}, Blackwell); "
            f"{torch.cuda.get_device_name(dev)} has {cap[0]}.{cap[1]}")
    if backend == "te":
        recipe_mod = importlib.import_module("transformer_engine.common.recipe")
        if not hasattr(recipe_mod, "NVFP4BlockScaling"):
            raise UserError("backend='te': the installed Transformer Engine has no "
                            "recipe.NVFP4BlockScaling (NVFP4 needs Transformer Engine >= 2.8)")
    else:
        try:
            importlib.import_module("torchao.prototype.moe_training.nvfp4_training.nvfp4_training")
        except ImportError as e:
            raise UserError(f"backend='torchao': the installed torchao has no NVFP4 training "
                            f"linear ({e}); torchao >= 0.18 has it") from e


class _TELinear(nn.Module):
    """``te.Linear`` run under Transformer Engine's autocast with the NVFP4 recipe."""

    def __init__(self, inner: nn.Module, recipe) -> None:
        super().__init__()
        self.inner = inner
        self.recipe = recipe

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        te = importlib.import_module("transformer_engine.pytorch")
        autocast = getattr(te, "autocast", None)
        if autocast is not None:  # TE >= 2.8
            with autocast(enabled=True, recipe=self.recipe):
                return self.inner(x)
        with te.fp8_autocast(enabled=True, fp8_recipe=self.recipe):
            return self.inner(x)


def kernel_linear(linear: nn.Linear, backend: str, recipe: str = "nvidia") -> nn.Module:
    """A kernel-backed NVFP4 replacement for ``linear`` (weights copied to its device), after
    :func:`check_backend`."""
    check_backend(backend, recipe, linear.weight.device)
    if backend == "te":
        te = importlib.import_module("transformer_engine.pytorch")
        te_recipe = importlib.import_module("transformer_engine.common.recipe")
        inner = te.Linear(linear.in_features, linear.out_features, bias=linear.bias is not None,
                          params_dtype=linear.weight.dtype, device=linear.weight.device)
        with torch.no_grad():
            inner.weight.copy_(linear.weight)
            if linear.bias is not None:
                inner.bias.copy_(linear.bias)
        return _TELinear(inner, te_recipe.NVFP4BlockScaling())
    ao = importlib.import_module("torchao.prototype.moe_training.nvfp4_training.nvfp4_training")
    return ao.NVFP4Linear.from_linear(linear)
