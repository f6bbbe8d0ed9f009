"""ATLAS: IRT item banks from model x item results, and adaptive tests of LLMs on a few items.

Li et al., "Adaptive Testing for LLM Evaluation: A Psychometric Alternative to Static
Benchmarks" (ICML 2026). See docs/atlas.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from icml26.core.lazy import lazy_exports

if TYPE_CHECKING:
    from icml26.atlas.bank import ItemBank
    from icml26.atlas.calibrate import calibrate
    from icml26.atlas.cat import AdaptiveTest, CATResult
    from icml26.atlas.data import Responses, load_responses
    from icml26.atlas.linking import link_items, mean_sigma
    from icml26.atlas.scoring import estimate_theta

__all__ = [
    "ItemBank",
    "Responses",
    "load_responses",
    "calibrate",
    "estimate_theta",
    "AdaptiveTest",
    "CATResult",
    "mean_sigma",
    "link_items",
]

# Each name is imported from its submodule on first use, so that ``icml26.atlas.cli`` stays light.
_WHERE = {
    "ItemBank": "bank",
    "calibrate": "calibrate",
    "AdaptiveTest": "cat",
    "CATResult": "cat",
    "Responses": "data",
    "load_responses": "data",
    "link_items": "linking",
    "mean_sigma": "linking",
    "estimate_theta": "scoring",
}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
