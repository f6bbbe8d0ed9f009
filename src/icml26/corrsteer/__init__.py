"""CorrSteer (Cho, Wu, Koshiyama; ICML 2026): steer an LM by the SAE features whose
generation-time activations correlate with reward. Also an SAE trainer with SAELens folders."""

from icml26.corrsteer.correlate import CorrelationAccumulator, collect
from icml26.corrsteer.sae import SAE, load_sae, save_sae
from icml26.corrsteer.steer import Feature, Steerer, select, side_effect_ratio
from icml26.corrsteer.train import TrainConfig, evaluate_sae, harvest, train_sae

__all__ = ["SAE", "save_sae", "load_sae", "TrainConfig", "train_sae", "harvest", "evaluate_sae",
           "CorrelationAccumulator", "collect", "Feature", "Steerer", "select", "side_effect_ratio"]
