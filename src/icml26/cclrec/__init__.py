"""CCLRec — consensus-driven contrastive learning for LLM-enhanced graph recommendation (ICML 2026).

Graph recommenders on RecBole atomic files or CSV, with full-ranking metrics: :class:`CCLRec` and
the baselines :class:`LightGCN`, :class:`SGL`, :class:`SimGCL`, :class:`RLMRecCon`,
:class:`MostPop`.
"""

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
