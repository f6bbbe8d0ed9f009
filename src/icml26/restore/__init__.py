"""RESTORE (Cho et al., ICML 2026, arXiv 2606.01711): calibrated visual token reduction with
retained positions, a log-size + RoPE-distance attention bias and distinctive-anchor merging,
for HF LLaVA-family models."""

from __future__ import annotations

from typing import TYPE_CHECKING

from icml26.core.lazy import lazy_exports

if TYPE_CHECKING:
    from icml26.restore.anchors import Hybrid, anchor_scores, distinctive_anchors, hybrid
    from icml26.restore.attention import distance_bias, rope_decay
    from icml26.restore.patch import RestoreConfig, apply_restore, remove_restore
    from icml26.restore.reducers import DivPrune, Reduction, ToMe, UniformAnchors, VisionZipLike

__all__ = [
    "RestoreConfig",
    "apply_restore",
    "remove_restore",
    "Reduction",
    "DivPrune",
    "VisionZipLike",
    "ToMe",
    "UniformAnchors",
    "Hybrid",
    "hybrid",
    "distinctive_anchors",
    "anchor_scores",
    "rope_decay",
    "distance_bias",
]

# Each name is imported from its submodule on first use, so that ``icml26.restore.cli`` stays light.
_WHERE = {
    "Hybrid": "anchors",
    "anchor_scores": "anchors",
    "distinctive_anchors": "anchors",
    "hybrid": "anchors",
    "distance_bias": "attention",
    "rope_decay": "attention",
    "RestoreConfig": "patch",
    "apply_restore": "patch",
    "remove_restore": "patch",
    "DivPrune": "reducers",
    "Reduction": "reducers",
    "ToMe": "reducers",
    "UniformAnchors": "reducers",
    "VisionZipLike": "reducers",
}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
