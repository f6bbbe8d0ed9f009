"""CAT: concentration-alignment SQNR decomposition and transforms for W4A4/W4A8 quantization
(Federici et al., "Dissecting Quantization Error: A Concentration-Alignment Perspective", ICML 2026).
"""

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
