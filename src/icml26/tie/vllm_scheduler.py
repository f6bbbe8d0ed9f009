"""TIE as a vLLM V1 scheduler: ``vllm serve MODEL --scheduler-cls
icml26.tie.vllm_scheduler.TIEAsyncScheduler`` (or ``TIEScheduler`` with async scheduling off).

Importing this module imports vLLM; everything else in :mod:`icml26.tie` works without it. The
requests' un-aged TIE score is ``request.priority`` unless ``ICML26_TIE_SCORE=module:function``
names another scorer: a router that calls :func:`icml26.tie.vllm.openai_payload` sends it. Aging
is controlled by ``ICML26_TIE_GAMMA`` / ``ICML26_TIE_TAU_S`` / ``ICML26_TIE_REBUILD_S``.
"""

from __future__ import annotations

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from icml26.tie.vllm import tie_scheduler_class

__all__ = ["TIEScheduler", "TIEAsyncScheduler"]

TIEScheduler = tie_scheduler_class(Scheduler)
TIEAsyncScheduler = tie_scheduler_class(AsyncScheduler)
