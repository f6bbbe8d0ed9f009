"""Quartet II: bit-exact NVFP4 simulation, the MS-EDEN estimator and a fully quantized Linear.

Heavy modules are imported on first use of a name (PEP 562), so ``icml26.quartet2.cli`` stays
light.
"""

from __future__ import annotations

import importlib

__all__ = [
    "NVFP4Tensor",
    "quantize_nvfp4",
    "ms_eden",
    "Quartet2Config",
    "QuartetIILinear",
    "NvidiaNVFP4Linear",
    "convert_to_quartet2",
]

_WHERE = {
    "NVFP4Tensor": "nvfp4",
    "quantize_nvfp4": "nvfp4",
    "ms_eden": "eden",
    "Quartet2Config": "linear",
    "QuartetIILinear": "linear",
    "NvidiaNVFP4Linear": "linear",
    "convert_to_quartet2": "linear",
}


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f"icml26.quartet2.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'icml26.quartet2' has no attribute {name!r}")
