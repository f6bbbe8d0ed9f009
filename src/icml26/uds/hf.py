"""Hugging Face ``Trainer`` integration: ``OnlineSelectionTrainer`` (and the mixin for TRL's
``SFTTrainer`` or any Trainer subclass).

Selection happens where the Trainer prefetches one optimizer step's micro-batches
(``Trainer.get_batch_samples``, transformers 5.x): every micro-batch is scored under
``no_grad``, the selector keeps ``budget`` of the window, the picks are re-padded into the same
number of micro-batches (so the Trainer's accumulation and sync bookkeeping is unchanged), and
``num_items_in_batch`` is recomputed for the picks. The normal ``training_step`` (loss and
backward, peft LoRA included) then runs on the picks only. A ``TrainerCallback`` cannot do
this: callbacks cannot change which samples are used.
"""

from __future__ import annotations

import torch
from transformers import Trainer

from icml26.uds.loop import budget_k, select_window

_KEYS = ("input_ids", "attention_mask", "labels")


def _rows(mb: dict, idx: torch.Tensor) -> list[dict]:
    extra = set(mb) - set(_KEYS)
    if extra:
        raise ValueError(
            f"online selection supports batch keys {_KEYS}; got extra keys {sorted(extra)}"
        )
    att = mb.get("attention_mask", torch.ones_like(mb["input_ids"]))
    out = []
    for i in idx.tolist():
        keep = att[i].bool()
        out.append({"input_ids": mb["input_ids"][i][keep], "labels": mb["labels"][i][keep]})
    return out


def _pad(rows: list[dict], pad_id: int) -> dict:
    t = max(r["input_ids"].numel() for r in rows)
    dev = rows[0]["input_ids"].device
    ids = torch.full((len(rows), t), pad_id, dtype=torch.long, device=dev)
    lab = torch.full((len(rows), t), -100, dtype=torch.long, device=dev)
    att = torch.zeros((len(rows), t), dtype=torch.long, device=dev)
    for i, r in enumerate(rows):
        n = r["input_ids"].numel()
        ids[i, :n], lab[i, :n], att[i, :n] = r["input_ids"], r["labels"], 1
    return {"input_ids": ids, "attention_mask": att, "labels": lab}


def regroup(micro_batches: list[dict], picks: list[torch.Tensor], pad_id: int) -> list[dict]:
    """The picked rows of each micro-batch, re-split into ``len(micro_batches)`` right-padded
    micro-batches of near-equal size (in window order). Needs at least one pick per micro-batch."""
    rows = [r for mb, idx in zip(micro_batches, picks, strict=True) for r in _rows(mb, idx)]
    n = len(micro_batches)
    if len(rows) < n:
        raise ValueError(
            f"{len(rows)} picks cannot fill {n} micro-batches: raise budget * per_device_train_batch_size * "
            "gradient_accumulation_steps, or use scope='micro_batch'"
        )
    sizes = [len(rows) // n + (i < len(rows) % n) for i in range(n)]
    out, start = [], 0
    for s in sizes:
        out.append(_pad(rows[start : start + s], pad_id))
        start += s
    return out


class OnlineSelectionMixin:
    """Adds online batch selection to a ``Trainer`` subclass.

    Args (keyword): selector: a :class:`~icml26.uds.selectors.Selector`; budget: K/b in (0, 1];
    scope: ``"step"`` (select over the optimizer step's window; keeps the effective batch at
    budget x configured) or ``"micro_batch"`` (the official code: per micro-batch);
    pad_token_id: for re-padding (default: the processing class's, else 0).
    Attribute ``selected_counts``: picks per optimizer step.
    """

    def __init__(
        self,
        *args,
        selector,
        budget: float,
        scope: str = "step",
        pad_token_id: int | None = None,
        **kwargs,
    ):
        if scope not in ("step", "micro_batch"):
            raise ValueError(f"scope must be 'step' or 'micro_batch'; got {scope!r}")
        if not 0 < budget <= 1:
            raise ValueError(f"budget must be in (0, 1]; got {budget}")
        super().__init__(*args, **kwargs)
        self.selector, self.budget, self.scope = selector, budget, scope
        pc = getattr(self, "processing_class", None)
        self.pad_token_id = (
            pad_token_id if pad_token_id is not None else (getattr(pc, "pad_token_id", None) or 0)
        )
        self.selected_counts: list[int] = []

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        batch_samples, num_items = super().get_batch_samples(epoch_iterator, num_batches, device)
        if not batch_samples:
            return batch_samples, num_items
        sizes = [mb["input_ids"].shape[0] for mb in batch_samples]
        if self.scope == "step":
            picks = select_window(
                self.model, batch_samples, self.selector, budget_k(self.budget, sum(sizes)), "step"
            )
            batch_samples = regroup(batch_samples, picks, self.pad_token_id)
        else:
            picks = [
                self.selector.select(self.model, mb, budget_k(self.budget, n))
                for mb, n in zip(batch_samples, sizes, strict=True)
            ]
            batch_samples = [
                {k: v[idx.to(v.device)] for k, v in mb.items()}
                for mb, idx in zip(batch_samples, picks, strict=True)
            ]
        self.selected_counts.append(sum(int(p.numel()) for p in picks))
        return batch_samples, self._get_num_items_in_batch(batch_samples, device)


class OnlineSelectionTrainer(OnlineSelectionMixin, Trainer):
    """``Trainer`` that trains each optimizer step on the selector's ``budget`` share of it."""
