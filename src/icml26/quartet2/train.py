"""Small pre-training runs comparing full precision, NVIDIA's NVFP4 recipe and Quartet II.

:func:`pretrain` trains a from-scratch ``tiny_llama`` (byte vocabulary by default) on token
blocks, with every eligible linear layer converted by :func:`convert_to_quartet2` (the embedding
and the tied LM head stay in full precision, as in the paper), and returns the training-loss
curve and the validation loss. Every arm sees the same data order, initialisation and schedule
for a given seed: only the linear layers' arithmetic differs.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import torch

from icml26.quartet2.linear import Quartet2Config, convert_to_quartet2

__all__ = ["PretrainConfig", "PretrainResult", "pretrain", "ARMS"]

ARMS = ("fp32", "nvidia", "quartet2")


@dataclass(frozen=True)
class PretrainConfig:
    """Model and schedule. Widths must be multiples of ``hadamard_dim`` for Quartet II to cover
    every projection. ``lr``: AdamW peak; linear warmup over ``warmup`` steps then cosine to 10%."""

    hidden: int = 128
    layers: int = 2
    heads: int = 4
    ffn: int = 384
    seq_len: int = 128
    batch_size: int = 16
    steps: int = 300
    lr: float = 2e-3
    weight_decay: float = 0.1
    warmup: int = 30
    grad_clip: float = 1.0
    hadamard_dim: int = 128
    four_over_six: bool = True
    eval_every: int = 0  # 0: only at the end
    vocab: str = "bytes"

    def __post_init__(self) -> None:
        for name in ("hidden", "layers", "heads", "ffn", "seq_len", "batch_size", "steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be >= 1; got {getattr(self, name)}")
        if not 0 <= self.warmup < self.steps:
            raise ValueError(f"`warmup` must be in [0, steps); got {self.warmup}")
        if self.lr <= 0:
            raise ValueError(f"`lr` must be > 0; got {self.lr}")


@dataclass
class PretrainResult:
    arm: str
    seed: int
    train_loss: list[float]
    val_loss: float
    eval_steps: list[int] = field(default_factory=list)
    eval_losses: list[float] = field(default_factory=list)
    #: mean next-token loss (nats) of each validation block at the end, in block order
    val_block_losses: list[float] = field(default_factory=list)
    converted: int = 0
    wall_s: float = 0.0
    config: dict = field(default_factory=dict)


def _lr_at(step: int, cfg: PretrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


@torch.no_grad()
def _eval_block_losses(model, blocks: torch.Tensor, batch_size: int, device) -> list[float]:
    """Mean next-token cross-entropy (nats) of each block (N, seq_len); their mean is the
    validation loss."""
    model.eval()
    out: list[float] = []
    for i in range(0, blocks.shape[0], batch_size):
        b = blocks[i : i + batch_size].to(device)
        logits = model(input_ids=b).logits[:, :-1].float()  # (B, T-1, V)
        tok = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                b[:, 1:].reshape(-1), reduction="none")
        out += tok.reshape(b.shape[0], -1).mean(dim=1).tolist()
    model.train()
    return out


def _eval_loss(model, blocks: torch.Tensor, batch_size: int, device) -> float:
    losses = _eval_block_losses(model, blocks, batch_size, device)
    return sum(losses) / len(losses)


def pretrain(
    arm: str,
    train_blocks: torch.Tensor,
    val_blocks: torch.Tensor,
    cfg: PretrainConfig,
    *,
    seed: int = 0,
    device: str = "cpu",
    progress=None,
    capture: dict | None = None,
) -> PretrainResult:
    """Train one arm; ``train_blocks`` (N, seq_len) LongTensor cycled in a seed-fixed order.

    ``arm``: "fp32" (no quantization), "nvidia" or "quartet2". ``progress``: a callable advanced
    by one per step. ``capture``: if given, after training it is filled with real GEMM operands of
    the trained model on one validation batch (``{"layer.input": X, "layer.grad_output": dY,
    "layer.weight": W}``, float32 2-D tensors) for the quantizer-error benchmark.
    """
    from icml26.core.lm import tiny_llama

    if arm not in ARMS:
        raise ValueError(f"arm must be one of {ARMS}; got {arm!r}")
    model, _ = tiny_llama(cfg.hidden, cfg.layers, cfg.heads, ffn=cfg.ffn, max_len=cfg.seq_len,
                          vocab=cfg.vocab, seed=seed)
    model = model.to(device).train()
    converted = 0
    if arm != "fp32":
        qcfg = Quartet2Config(recipe=arm, hadamard_dim=cfg.hadamard_dim,
                              four_over_six=cfg.four_over_six, seed=seed * 1000)
        report = convert_to_quartet2(model, recipe=arm, config=qcfg)
        converted = sum(r == "converted" for _, r in report)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95),
                            weight_decay=cfg.weight_decay)
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(train_blocks.shape[0], generator=g)
    losses: list[float] = []
    eval_steps, eval_losses = [], []
    t0 = time.perf_counter()
    for step in range(cfg.steps):
        idx = torch.arange(step * cfg.batch_size, (step + 1) * cfg.batch_size) % order.numel()
        batch = train_blocks[order[idx]].to(device)
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, cfg)
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            raise FloatingPointError(f"{arm} seed {seed}: loss became {losses[-1]} at step {step}")
        if cfg.eval_every and (step + 1) % cfg.eval_every == 0 and step + 1 < cfg.steps:
            eval_steps.append(step + 1)
            eval_losses.append(_eval_loss(model, val_blocks, cfg.batch_size, device))
        if progress is not None:
            progress(1)
    block_losses = _eval_block_losses(model, val_blocks, cfg.batch_size, device)
    val = sum(block_losses) / len(block_losses)
    eval_steps.append(cfg.steps)
    eval_losses.append(val)
    if capture is not None:
        capture.update(_capture_operands(model, val_blocks[: cfg.batch_size].to(device)))
    return PretrainResult(arm=arm, seed=seed, train_loss=losses, val_loss=val,
                          eval_steps=eval_steps, eval_losses=eval_losses,
                          val_block_losses=block_losses, converted=converted,
                          wall_s=time.perf_counter() - t0, config=asdict(cfg))


def _capture_operands(model, batch: torch.Tensor) -> dict[str, torch.Tensor]:
    """Inputs X (T, in), output gradients dY (T, out) and weights W (out, in) of every linear
    layer on one batch."""
    from torch import nn

    out: dict[str, torch.Tensor] = {}
    handles = []
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear) and not name.endswith("lm_head"):
            def fwd(m, inp, _o, name=name):
                out[f"{name}.input"] = inp[0].detach().reshape(-1, inp[0].shape[-1]).float().cpu()

            def bwd(m, _gi, gout, name=name):
                out[f"{name}.grad_output"] = gout[0].detach().reshape(-1, gout[0].shape[-1]).float().cpu()

            handles += [mod.register_forward_hook(fwd), mod.register_full_backward_hook(bwd)]
            out[f"{name}.weight"] = mod.weight.detach().float().cpu().clone()
    model.train()
    model.zero_grad(set_to_none=True)
    model(input_ids=batch, labels=batch).loss.backward()
    model.zero_grad(set_to_none=True)
    for h in handles:
        h.remove()
    return out
