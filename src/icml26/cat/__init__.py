"""CAT: concentration-alignment SQNR decomposition and transforms for W4A4/W4A8 quantization
(Federici et al., "Dissecting Quantization Error: A Concentration-Alignment Perspective", ICML 2026).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from icml26.core.lazy import lazy_exports

if TYPE_CHECKING:
    from icml26.cat.model import (
        apply_transform,
        build_transforms,
        collect_covariances,
        fake_quantize,
        layer_sqnr,
        load_quantized,
        save_quantized,
    )
    from icml26.cat.quant import QuantConfig, QuantLinear, quantize_sym
    from icml26.cat.quarot import quarot_layer_transforms, quarot_rotate_
    from icml26.cat.sqnr import SQNRStats, sqnr_terms
    from icml26.cat.transforms import (
        BlockTransform,
        cat_transform,
        hadamard,
        hadamard_transform,
        smoothquant_transform,
    )

__all__ = [
    "BlockTransform",
    "QuantConfig",
    "QuantLinear",
    "SQNRStats",
    "apply_transform",
    "build_transforms",
    "cat_transform",
    "collect_covariances",
    "fake_quantize",
    "hadamard",
    "hadamard_transform",
    "layer_sqnr",
    "load_quantized",
    "quantize_sym",
    "quarot_layer_transforms",
    "quarot_rotate_",
    "save_quantized",
    "smoothquant_transform",
    "sqnr_terms",
]

# Each name is imported from its submodule on first use, so that ``icml26.cat.cli`` stays light.
_WHERE = {
    "apply_transform": "model",
    "build_transforms": "model",
    "collect_covariances": "model",
    "fake_quantize": "model",
    "layer_sqnr": "model",
    "load_quantized": "model",
    "save_quantized": "model",
    "QuantConfig": "quant",
    "QuantLinear": "quant",
    "quantize_sym": "quant",
    "quarot_layer_transforms": "quarot",
    "quarot_rotate_": "quarot",
    "SQNRStats": "sqnr",
    "sqnr_terms": "sqnr",
    "BlockTransform": "transforms",
    "cat_transform": "transforms",
    "hadamard": "transforms",
    "hadamard_transform": "transforms",
    "smoothquant_transform": "transforms",
}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
