"""QUATRO reconstruction (``tr_dual``): per-query KL trust-region loss for GRPO-style RL
(Lee et al., ICML 2026, arXiv 2602.04620). Names read ``tr_dual`` because the paper's method
section could not be checked; see docs/quatro.md."""

from icml26.quatro.dual import group_advantages, solve_dual
from icml26.quatro.loop import RLConfig, RLLoop
from icml26.quatro.losses import METHODS, LossConfig, loss_config, policy_loss

__all__ = [
    "policy_loss",
    "LossConfig",
    "loss_config",
    "METHODS",
    "solve_dual",
    "group_advantages",
    "RLConfig",
    "RLLoop",
    "TrDualGRPOTrainer",
    "TrDualGRPOConfig",
]

_TRL_NAMES = ("TrDualGRPOTrainer", "TrDualGRPOConfig")


def __getattr__(name):
    # TRL is optional (``icml26[trl]``): import it only when the trainer is asked for.
    if name in _TRL_NAMES:
        from icml26.quatro import trl_trainer

        return getattr(trl_trainer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
