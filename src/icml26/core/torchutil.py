"""Small torch helpers shared by methods: dtype names, devices, bootstrap intervals."""

from __future__ import annotations

import numpy as np
import torch

from icml26.core.errors import UserError

__all__ = ["parse_dtype", "check_device", "model_device", "bootstrap_ci"]

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "float64": torch.float64,
    "fp64": torch.float64,
    "double": torch.float64,
}


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    """``"bf16"`` -> ``torch.bfloat16`` etc.; a clear error listing the names otherwise."""
    if isinstance(name, torch.dtype):
        return name
    try:
        return _DTYPES[str(name).lower().removeprefix("torch.")]
    except KeyError:
        raise UserError(
            f"unknown dtype {name!r}; use one of {', '.join(sorted(_DTYPES))}"
        ) from None


def check_device(device: str) -> str:
    """Validate a device string early, with a message instead of a deep CUDA error."""
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise UserError(f"invalid device {device!r}: {exc}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {device!r} asked for, but torch sees no CUDA GPU here")
    return device


def model_device(model) -> torch.device:
    """Where ``model`` takes its inputs: HF's ``model.device``, else its first parameter's (the
    CPU for a model without parameters). Inputs built inside a method go there, so the method
    works on a GPU model whatever the default device."""
    dev = getattr(model, "device", None)
    if isinstance(dev, torch.device):
        return dev
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def bootstrap_ci(
    statistic, *samples: np.ndarray, n_boot: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap CI of ``statistic(*resampled)``, resampling the rows of all
    ``samples`` jointly (they are paired: same length, same index = same unit)."""
    n = len(samples[0])
    if any(len(s) != n for s in samples):
        raise ValueError("paired bootstrap needs samples of equal length")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    stats = np.array([statistic(*(np.asarray(s)[i] for s in samples)) for i in idx])
    alpha = (1 - level) / 2
    return float(np.quantile(stats, alpha)), float(np.quantile(stats, 1 - alpha))
