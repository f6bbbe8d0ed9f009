"""ChemCensor: chemical-plausibility levels (-1..5) for single-step retrosynthesis proposals
(Zagribelnyy et al., "When Single Answer Is Not Enough: Rethinking Single-Step Retrosynthesis
Benchmarks for LLMs", ICML 2026), a precedent database, a validated-reaction builder and
plausibility@K beside exact-match Top-K.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from icml26.core.lazy import lazy_exports

if TYPE_CHECKING:
    from icml26.chemcensor.db import ReactionDB
    from icml26.chemcensor.evaluate import build_dataset, evaluate_topk
    from icml26.chemcensor.scorer import ChemCensor, Level

__all__ = ["ChemCensor", "Level", "ReactionDB", "build_dataset", "evaluate_topk"]

# Each name is imported from its submodule on first use, so that ``icml26.chemcensor.cli`` stays light.
_WHERE = {
    "ReactionDB": "db",
    "build_dataset": "evaluate",
    "evaluate_topk": "evaluate",
    "ChemCensor": "scorer",
    "Level": "scorer",
}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
