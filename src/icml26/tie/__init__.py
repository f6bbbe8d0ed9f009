"""TIE: log-t output-length distributions and tail-aware SJF scheduling (ICML 2026).

Public API: the log-t model and fits, the TIE score, the aged waiting queue, the predictors and the
vLLM adapters. The shared serving simulator lives in :mod:`icml26.sim`.
"""

from icml26.tie.lengths import LogT, fit_lognormal, fit_logt, ks_test
from icml26.tie.queue import QueueConfig, TIEQueue
from icml26.tie.score import adaptive_beta, tie_score, truncated_cvar, truncated_mean

__all__ = ["LogT", "fit_logt", "fit_lognormal", "ks_test", "tie_score", "truncated_mean", "truncated_cvar",
           "adaptive_beta", "TIEQueue", "QueueConfig"]
