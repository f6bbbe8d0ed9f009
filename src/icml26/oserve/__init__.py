"""OServe (ICML 2026): heterogeneous deployment plans, LP routing per request type, rate
prediction per type and switch plans, for a fleet of LLM engines simulated by :mod:`icml26.sim`.

See docs/oserve.md. Main entry points: :class:`WorkloadTypes`, :func:`rate_table`,
:func:`dispatch`, :func:`search`, :func:`plan_switch`, :class:`TypeRatePredictor`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from icml26.core.lazy import lazy_exports

if TYPE_CHECKING:
    from icml26.oserve.capacity import Cluster, ReplicaConfig, rate_table
    from icml26.oserve.dispatch import Dispatch, dispatch
    from icml26.oserve.predictor import TypeRatePredictor
    from icml26.oserve.search import Plan, Scorer, exhaustive, search
    from icml26.oserve.switch import SwitchPlan, plan_switch
    from icml26.oserve.types import WorkloadTypes

__all__ = ["WorkloadTypes", "TypeRatePredictor", "Cluster", "ReplicaConfig", "rate_table", "Dispatch",
           "dispatch", "Scorer", "Plan", "search", "exhaustive", "SwitchPlan", "plan_switch"]

# Each name is imported from its submodule on first use, so that ``icml26.oserve.cli`` stays light.
_WHERE = {
    "Cluster": "capacity",
    "ReplicaConfig": "capacity",
    "rate_table": "capacity",
    "Dispatch": "dispatch",
    "dispatch": "dispatch",
    "TypeRatePredictor": "predictor",
    "Plan": "search",
    "Scorer": "search",
    "exhaustive": "search",
    "search": "search",
    "SwitchPlan": "switch",
    "plan_switch": "switch",
    "WorkloadTypes": "types",
}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
