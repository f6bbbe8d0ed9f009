"""ECHO: elastic speculative decoding with sparse gating, for high-concurrency serving.

Draft trees per request (:class:`DraftTree`), tree policies under one batch verification budget
(:class:`Echo` and the baselines), batched super-tree verification (:func:`verify_batch`), live
decoding (:class:`SpeculativeDecoder`), exact offline replay (:class:`ReplaySet`), gate calibration
(:func:`calibrate_gates`), the verification-knee cost model (:func:`fit_knee`, :class:`SpecCost`,
:func:`replica_spec_cost`) and an HF-``generate``-style entry (:func:`echo_generate`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from icml26.core.lazy import lazy_exports

if TYPE_CHECKING:
    from icml26.echo.calibrate import GateCalibration, calibrate_gates
    from icml26.echo.cost import Knee, SpecCost, fit_knee, gpu_spec_cost, replica_spec_cost
    from icml26.echo.decode import SpeculativeDecoder
    from icml26.echo.hf import check_tokenizers, echo_generate
    from icml26.echo.model import TreeLM
    from icml26.echo.policies import AR, AdaptiveChain, DenseDynamic, Echo, StaticTree, make_policy
    from icml26.echo.replay import ReplaySet
    from icml26.echo.tree import DraftTree
    from icml26.echo.verify import verify_batch

__all__ = [
    "DraftTree", "TreeLM", "Echo", "StaticTree", "DenseDynamic", "AdaptiveChain", "AR", "make_policy",
    "verify_batch", "SpeculativeDecoder", "ReplaySet", "calibrate_gates", "GateCalibration",
    "Knee", "fit_knee", "SpecCost", "gpu_spec_cost", "replica_spec_cost", "echo_generate", "check_tokenizers",
]

# Each name is imported from its submodule on first use, so that ``icml26.echo.cli`` stays light.
_WHERE = {
    "GateCalibration": "calibrate",
    "calibrate_gates": "calibrate",
    "Knee": "cost",
    "SpecCost": "cost",
    "fit_knee": "cost",
    "gpu_spec_cost": "cost",
    "replica_spec_cost": "cost",
    "SpeculativeDecoder": "decode",
    "check_tokenizers": "hf",
    "echo_generate": "hf",
    "TreeLM": "model",
    "AR": "policies",
    "AdaptiveChain": "policies",
    "DenseDynamic": "policies",
    "Echo": "policies",
    "StaticTree": "policies",
    "make_policy": "policies",
    "ReplaySet": "replay",
    "DraftTree": "tree",
    "verify_batch": "verify",
}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
