"""OServe (ICML 2026): heterogeneous deployment plans, LP routing per request type, rate
prediction per type and switch plans, for a fleet of LLM engines simulated by :mod:`icml26.sim`.

See docs/oserve.md. Main entry points: :class:`WorkloadTypes`, :func:`rate_table`,
:func:`dispatch`, :func:`search`, :func:`plan_switch`, :class:`TypeRatePredictor`.
"""

from icml26.oserve.capacity import Cluster, ReplicaConfig, rate_table
from icml26.oserve.dispatch import Dispatch, dispatch
from icml26.oserve.predictor import TypeRatePredictor
from icml26.oserve.search import Plan, Scorer, exhaustive, search
from icml26.oserve.switch import SwitchPlan, plan_switch
from icml26.oserve.types import WorkloadTypes

__all__ = ["WorkloadTypes", "TypeRatePredictor", "Cluster", "ReplicaConfig", "rate_table", "Dispatch",
           "dispatch", "Scorer", "Plan", "search", "exhaustive", "SwitchPlan", "plan_switch"]
