"""ATLAS: IRT item banks from model x item results, and adaptive tests of LLMs on a few items.

Li et al., "Adaptive Testing for LLM Evaluation: A Psychometric Alternative to Static
Benchmarks" (ICML 2026). See docs/atlas.md.
"""

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
