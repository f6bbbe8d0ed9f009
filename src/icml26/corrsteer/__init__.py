"""CorrSteer (Cho, Wu, Koshiyama; ICML 2026): steer an LM by the SAE features whose
generation-time activations correlate with reward. Also an SAE trainer with SAELens folders."""

from __future__ import annotations

from typing import TYPE_CHECKING

from icml26.core.lazy import lazy_exports

if TYPE_CHECKING:
    from icml26.corrsteer.correlate import CorrelationAccumulator, collect
    from icml26.corrsteer.sae import SAE, load_sae, save_sae
    from icml26.corrsteer.steer import Feature, Steerer, select, side_effect_ratio
    from icml26.corrsteer.train import TrainConfig, evaluate_sae, harvest, train_sae

__all__ = ["SAE", "save_sae", "load_sae", "TrainConfig", "train_sae", "harvest", "evaluate_sae",
           "CorrelationAccumulator", "collect", "Feature", "Steerer", "select", "side_effect_ratio"]

# Each name is imported from its submodule on first use, so that ``icml26.corrsteer.cli`` stays light.
_WHERE = {
    "CorrelationAccumulator": "correlate",
    "collect": "correlate",
    "SAE": "sae",
    "load_sae": "sae",
    "save_sae": "sae",
    "Feature": "steer",
    "Steerer": "steer",
    "select": "steer",
    "side_effect_ratio": "steer",
    "TrainConfig": "train",
    "evaluate_sae": "train",
    "harvest": "train",
    "train_sae": "train",
}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
