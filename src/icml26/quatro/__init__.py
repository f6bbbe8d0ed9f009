"""QUATRO reconstruction (``tr_dual``): per-query KL trust-region loss for GRPO-style RL
(Lee et al., ICML 2026, arXiv 2602.04620). Names read ``tr_dual`` because the paper's method
section could not be checked; see docs/quatro.md."""

from __future__ import annotations

from typing import TYPE_CHECKING

from icml26.core.lazy import lazy_exports

if TYPE_CHECKING:
    from icml26.quatro.dual import group_advantages, solve_dual
    from icml26.quatro.loop import RLConfig, RLLoop
    from icml26.quatro.losses import METHODS, LossConfig, loss_config, policy_loss
    from icml26.quatro.trl_trainer import TrDualGRPOConfig, TrDualGRPOTrainer

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

# Each name is imported from its submodule on first use, so that ``icml26.quatro.cli`` stays light.
# TRL is optional (``icml26[trl]``): ``trl_trainer`` is imported only when the trainer is asked for.
_WHERE = {
    "group_advantages": "dual",
    "solve_dual": "dual",
    "RLConfig": "loop",
    "RLLoop": "loop",
    "METHODS": "losses",
    "LossConfig": "losses",
    "loss_config": "losses",
    "policy_loss": "losses",
    "TrDualGRPOTrainer": "trl_trainer",
    "TrDualGRPOConfig": "trl_trainer",
}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
