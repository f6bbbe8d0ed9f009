"""The paper's supervised fine-tuning (SFT) baseline, for the side-effect comparison.

CorrSteer compares its side-effect ratio with that of full fine-tuning on the same training
items (official ``sft.py``). Recipe as there: every parameter trained, batch 1 (one optimizer
step per item), AdamW with weight decay 0.01, learning rate ``min(lr, 5e-6)`` when fewer than
2,000 items or steps (the paper's small-data cap; ``lr`` = 1e-5), linear warm-up over
``max(100, 3%)`` of the steps then cosine decay to 0, gradient norm clipped at 1.0, loss =
cross-entropy on the answer span only (here the one letter token after ``Answer:``).
The paper runs ``ceil(4000 / n_train)`` epochs; ``epochs`` is a parameter (the claim's CPU
budget uses fewer, noted in its result).

Training keeps float32 master weights on a copy of the model, with matrix products under
bf16 autocast by default (``compute_dtype``); pure bf16 weights — what the official script
steps AdamW on — round away most updates of size 5e-6 (bf16 keeps 8 significant bits, so any
weight above ~1.3e-3 in magnitude cannot move by 5e-6). The comparison baseline is the *same*
float32 copy before training, scored the same way, so SFT's side effects are not mixed with a
dtype change.
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from icml26.core.errors import UserError

__all__ = ["SFTConfig", "sft_schedule", "finetune_letters", "letter_logits"]


@dataclass(frozen=True)
class SFTConfig:
    lr: float = 1e-5
    epochs: int = 1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    small_data_lr_cap: float = 5e-6  # paper: applied when n_train < 2000 or steps < 2000
    seed: int = 0
    #: autocast for matmuls; None = plain float32; "auto" = bf16 where the device runs it natively
    compute_dtype: str | None = "auto"

    def __post_init__(self):
        if self.epochs < 1:
            raise UserError(f"SFT epochs must be >= 1; got {self.epochs}")
        if not self.lr > 0:
            raise UserError(f"SFT learning rate must be > 0; got {self.lr}")


def sft_schedule(n_train: int, cfg: SFTConfig) -> tuple[int, int, float]:
    """``(total_steps, warmup_steps, effective_lr)`` of the paper's recipe for ``n_train`` items."""
    total = cfg.epochs * n_train
    lr = min(cfg.lr, cfg.small_data_lr_cap) if (n_train < 2000 or total < 2000) else cfg.lr
    warmup = max(100, int(0.03 * total)) if total > 0 else 0
    return total, warmup, lr


def _lr_factor(step: int, total: int, warmup: int) -> float:
    if step < warmup:
        return step / max(1, warmup)
    prog = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(max(prog, 0.0), 1.0)))


def _autocast(model, compute_dtype: str | None):
    import contextlib

    dev = next(model.parameters()).device.type
    if compute_dtype == "auto":
        from icml26.core.lm import default_dtype

        compute_dtype = "bf16" if default_dtype(dev) == torch.bfloat16 else None
    if compute_dtype is None:
        return contextlib.nullcontext()
    from icml26.core.torchutil import parse_dtype

    return torch.autocast(dev, dtype=parse_dtype(compute_dtype))


def _last_logits(model, ids: torch.Tensor) -> torch.Tensor:
    """Next-token logits at the last position of ``ids`` ``(T,)`` (only that position's head)."""
    kw = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    return model(input_ids=ids[None], use_cache=False, **kw).logits[0, -1].float()


def finetune_letters(model, ids: Sequence[torch.Tensor], targets: Sequence[int], cfg: SFTConfig,
                     progress=None, desc: str = "SFT"):
    """A float32 copy of ``model`` fine-tuned on prompts ``ids`` (each ending in ``Answer:``) with
    one-token ``targets``. Returns ``(model_fp32, stats)``; ``model`` is left untouched."""
    if len(ids) != len(targets):
        raise ValueError(f"{len(ids)} prompts but {len(targets)} targets")
    if not ids:
        raise UserError("SFT needs at least one training item")
    device = next(model.parameters()).device
    ft = copy.deepcopy(model).float().train()
    total, warmup, lr = sft_schedule(len(ids), cfg)
    params = [p for p in ft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=cfg.weight_decay)
    rng = np.random.default_rng(cfg.seed)
    order = np.concatenate([rng.permutation(len(ids)) for _ in range(cfg.epochs)])
    losses = []
    it = enumerate(order)
    if progress is not None:
        it = progress.track(it, total, desc)
    for step, i in it:
        for g in opt.param_groups:
            g["lr"] = lr * _lr_factor(step, total, warmup)
        with _autocast(ft, cfg.compute_dtype):
            logits = _last_logits(ft, ids[int(i)].to(device))
        loss = torch.nn.functional.cross_entropy(logits[None].float(),
                                                 torch.tensor([int(targets[int(i)])], device=device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        opt.step()
        losses.append(float(loss.detach()))
    ft.eval()
    for p in ft.parameters():
        p.requires_grad_(False)
    del opt
    k = max(1, len(losses) // 10)
    return ft, {"steps": total, "warmup": warmup, "lr": lr, "epochs": cfg.epochs,
                "loss_first10pct": float(np.mean(losses[:k])), "loss_last10pct": float(np.mean(losses[-k:]))}


@torch.no_grad()
def letter_logits(model, ids: Sequence[torch.Tensor], letters: Sequence[int], progress=None,
                  desc: str = "score", compute_dtype: str | None = "auto",
                  groups: torch.Tensor | None = None) -> torch.Tensor:
    """Letter logits ``(n, len(letters))`` after each prompt (one full forward each, no steering);
    with ``groups`` (the unrestricted first token) the grouped logits ``(n, len(letters) + 1)``."""
    from icml26.corrsteer.mcqsteer import grouped_logits

    device = next(model.parameters()).device
    out = []
    it = ids if progress is None else progress.track(ids, len(ids), desc)
    with _autocast(model, compute_dtype):
        for x in it:
            last = _last_logits(model, x.to(device))
            out.append((last[list(letters)] if groups is None
                        else grouped_logits(last[None], groups, len(letters))[0]).float().cpu())
    return torch.stack(out)
