"""SSO — the Spectral Sphere Optimizer (Xie et al., ICML 2026, arXiv 2601.08393)."""

from icml26.sso.groups import ChainedOptimizer, spectral_init_, sso_optimizer, sso_param_groups
from icml26.sso.optim import SSO, sso_update
from icml26.sso.spectral import msign, power_iteration, solve_lambda

__all__ = ["SSO", "sso_update", "sso_param_groups", "sso_optimizer", "ChainedOptimizer",
           "spectral_init_",
           "msign", "power_iteration", "solve_lambda"]
