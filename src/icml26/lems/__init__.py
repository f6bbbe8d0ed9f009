"""LEMS + KFAC-SVD: compress an HF causal LM's linear layers to a parameter budget.

KFAC-whitened truncated SVD per layer, ranks chosen globally by a layer-wise error model and a
knapsack (LEMS), with the paper's baselines (plain SVD, SVD-LLM, ASVD, FWSVD, uniform ranks).
See docs/lems.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from icml26.core.lazy import lazy_exports

if TYPE_CHECKING:
    from icml26.lems.compress import CompressConfig, CompressionReport, allocate, compress
    from icml26.lems.export import apply_ranks_, load_compressed, save_compressed
    from icml26.lems.factorize import LayerFactors, factorize
    from icml26.lems.layers import target_layers
    from icml26.lems.stats import KFACStats, collect_kfac_stats

__all__ = [
    "CompressConfig",
    "CompressionReport",
    "KFACStats",
    "LayerFactors",
    "allocate",
    "apply_ranks_",
    "collect_kfac_stats",
    "compress",
    "factorize",
    "load_compressed",
    "save_compressed",
    "target_layers",
]

# Each name is imported from its submodule on first use, so that ``icml26.lems.cli`` stays light.
_WHERE = {
    "CompressConfig": "compress",
    "CompressionReport": "compress",
    "allocate": "compress",
    "compress": "compress",
    "apply_ranks_": "export",
    "load_compressed": "export",
    "save_compressed": "export",
    "LayerFactors": "factorize",
    "factorize": "factorize",
    "target_layers": "layers",
    "KFACStats": "stats",
    "collect_kfac_stats": "stats",
}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
