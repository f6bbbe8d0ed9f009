"""Run calibration batches through a model with temporary forward pre-hooks.

Calibration statistics (input covariances, activation ranges, SQNR trackers) all follow one
pattern: register a pre-hook on some modules, forward a list of token batches without
gradients, and remove the hooks even if a forward fails. This is that pattern, once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import torch

__all__ = ["forward_with_pre_hooks"]


@torch.no_grad()
def forward_with_pre_hooks(
    model: torch.nn.Module,
    batches: Iterable[torch.Tensor],
    hooks: Mapping[torch.nn.Module, Callable],
    *,
    progress=None,
    description: str = "calibrate",
) -> int:
    """Forward every ``(B, L)`` id batch with ``hooks`` (module -> ``fn(module, args)``)
    registered as forward pre-hooks; returns the number of batches run. Hooks are always
    removed, and batches are moved to the model's device."""
    batches = list(batches)
    device = next(model.parameters()).device
    handles = [module.register_forward_pre_hook(fn) for module, fn in hooks.items()]
    try:
        it = batches if progress is None else progress.track(batches, len(batches), description)
        for b in it:
            model(input_ids=b.to(device))
    finally:
        for h in handles:
            h.remove()
    return len(batches)
