"""UDS: utility-diversity aware online batch selection for LLM SFT (Zou et al., ICML 2026)."""

from icml26.uds.loop import TrainConfig, select_batch, select_window, train_online
from icml26.uds.selectors import (
    GradNormSelector,
    MaxLossSelector,
    RandomSelector,
    RHOLossSelector,
    Selector,
    UDSSelector,
    make_selector,
)

__all__ = [
    "GradNormSelector",
    "MaxLossSelector",
    "RHOLossSelector",
    "RandomSelector",
    "Selector",
    "TrainConfig",
    "UDSSelector",
    "make_selector",
    "select_batch",
    "select_window",
    "train_online",
]
