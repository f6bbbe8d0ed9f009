"""UDS: utility-diversity aware online batch selection for LLM SFT (Zou et al., ICML 2026)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from icml26.core.lazy import lazy_exports

if TYPE_CHECKING:
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

# Each name is imported from its submodule on first use, so that ``icml26.uds.cli`` stays light.
_WHERE = {
    "TrainConfig": "loop",
    "select_batch": "loop",
    "select_window": "loop",
    "train_online": "loop",
    "GradNormSelector": "selectors",
    "MaxLossSelector": "selectors",
    "RandomSelector": "selectors",
    "RHOLossSelector": "selectors",
    "Selector": "selectors",
    "UDSSelector": "selectors",
    "make_selector": "selectors",
}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
