"""CCLRec — consensus-driven contrastive learning for LLM-enhanced graph recommendation (ICML 2026).

Graph recommenders on RecBole atomic files or CSV, with full-ranking metrics: :class:`CCLRec` and
the baselines :class:`LightGCN`, :class:`SGL`, :class:`SimGCL`, :class:`RLMRecCon`,
:class:`MostPop`. RecBole users: ``icml26.cclrec.recbole_model.CCLRecRecBole`` (a RecBole
``GeneralRecommender``; importing it imports RecBole).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from icml26.core.lazy import lazy_exports

if TYPE_CHECKING:
    from icml26.cclrec.base import load
    from icml26.cclrec.baselines import SGL, LightGCN, MostPop, RLMRecCon, SimGCL
    from icml26.cclrec.data import load_interactions, split
    from icml26.cclrec.metrics import evaluate
    from icml26.cclrec.model import CCLRec, weighted_info_nce
    from icml26.cclrec.semantics import item_semantics

__all__ = [
    "CCLRec",
    "LightGCN",
    "SGL",
    "SimGCL",
    "RLMRecCon",
    "MostPop",
    "weighted_info_nce",
    "load_interactions",
    "split",
    "evaluate",
    "item_semantics",
    "load",
]

# Each name is imported from its submodule on first use, so that ``icml26.cclrec.cli`` stays light.
_WHERE = {
    "load": "base",
    "SGL": "baselines",
    "LightGCN": "baselines",
    "MostPop": "baselines",
    "RLMRecCon": "baselines",
    "SimGCL": "baselines",
    "load_interactions": "data",
    "split": "data",
    "evaluate": "metrics",
    "CCLRec": "model",
    "weighted_info_nce": "model",
    "item_semantics": "semantics",
}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
