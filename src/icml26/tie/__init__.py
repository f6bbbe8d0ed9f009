"""TIE: log-t output-length distributions and tail-aware SJF scheduling (ICML 2026).

Public API: the log-t model and fits, the TIE score, the aged waiting queue, the predictors and the
vLLM adapters. The shared serving simulator lives in :mod:`icml26.sim`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from icml26.core.lazy import lazy_exports

if TYPE_CHECKING:
    from icml26.tie.lengths import LogT, fit_lognormal, fit_logt, ks_test
    from icml26.tie.queue import QueueConfig, TIEQueue
    from icml26.tie.score import adaptive_beta, tie_score, truncated_cvar, truncated_mean

__all__ = ["LogT", "fit_logt", "fit_lognormal", "ks_test", "tie_score", "truncated_mean", "truncated_cvar",
           "adaptive_beta", "TIEQueue", "QueueConfig"]

# Each name is imported from its submodule on first use, so that ``icml26.tie.cli`` stays light.
_WHERE = {
    "LogT": "lengths",
    "fit_lognormal": "lengths",
    "fit_logt": "lengths",
    "ks_test": "lengths",
    "QueueConfig": "queue",
    "TIEQueue": "queue",
    "adaptive_beta": "score",
    "tie_score": "score",
    "truncated_cvar": "score",
    "truncated_mean": "score",
}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
