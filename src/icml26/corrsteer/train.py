"""Residual harvesting, TopK/ReLU SAE training and SAE evaluation (our recipe, parameters below).

Recipe (Gao et al. 2024 "Scaling and evaluating sparse autoencoders", adapted):
inputs are scaled by one constant ``s`` so that ``E||s x||^2 = d_in``; ``b_dec`` starts at the
mean scaled input; decoder rows are kept at unit norm after every Adam step (and the gradient
component along each row is removed first); TopK adds the AuxK loss (``k_aux = d_in / 2`` dead
latents reconstruct the residual error, coefficient ``aux_coef = 1/32``); a latent is dead after
``dead_after`` tokens without firing. ReLU SAEs use MSE + ``l1_coef * sum_i f_i ||W_dec[i]||``.
At the end the scale is folded into the weights (:meth:`SAE.fold_input_scale_`), so the saved SAE
acts on raw residuals. Training resumes from ``checkpoint`` (a folder) when given.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from icml26.core.errors import UserError
from icml26.corrsteer.sae import SAE, hook_name

__all__ = ["blocks", "harvest", "TrainConfig", "train_sae", "evaluate_sae", "StopForward"]


class StopForward(Exception):
    """Raised inside a pre-hook to cut the forward pass after the deepest layer needed."""


def blocks(model) -> torch.nn.ModuleList:
    """The decoder blocks of an HF causal LM (Llama/Gemma/Qwen/Mistral ``model.model.layers``,
    GPT-2 ``transformer.h``, GPT-NeoX ``gpt_neox.layers``)."""
    for path in ("model.layers", "transformer.h", "gpt_neox.layers", "model.decoder.layers"):
        obj = model
        try:
            for part in path.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            continue
        if isinstance(obj, torch.nn.ModuleList):
            return obj
    raise UserError(f"cannot find the decoder blocks of {type(model).__name__}")


def check_layers(model, layers) -> list[int]:
    n = len(blocks(model))
    layers = sorted({int(x) for x in layers})
    if not layers:
        raise UserError("no layers given")
    bad = [x for x in layers if not 0 <= x < n]
    if bad:
        raise UserError(f"layer(s) {bad} out of range: the model has {n} blocks (0..{n - 1})")
    return layers


@torch.no_grad()
def harvest(model, ids: torch.Tensor, layers, *, batch_size: int = 8, progress=None,
            out_dtype: torch.dtype = torch.float32) -> dict[int, torch.Tensor]:
    """Residuals entering each block in ``layers`` (``blocks.L.hook_resid_pre`` =
    ``hidden_states[L]``) for token blocks ``ids`` ``(n, T)``; position 0 (the attention sink,
    norms far above the rest) is dropped. Returns ``{L: (n*(T-1), d) out_dtype}``. The forward is
    cut after the deepest requested layer."""
    layers = check_layers(model, layers)
    mods = blocks(model)
    store: dict[int, list[torch.Tensor]] = {L: [] for L in layers}
    deepest = layers[-1]

    def make(L):
        def hook(module, args, kwargs):
            h = args[0] if args else kwargs["hidden_states"]
            store[L].append(h[:, 1:].reshape(-1, h.shape[-1]).to(out_dtype).cpu())
            if deepest == L:
                raise StopForward
        return hook

    handles = [mods[L].register_forward_pre_hook(make(L), with_kwargs=True) for L in layers]
    device = next(model.parameters()).device
    chunks = list(ids.split(batch_size))
    it = chunks if progress is None else progress.track(chunks, len(chunks), "harvest residuals")
    try:
        for b in it:
            with contextlib.suppress(StopForward):
                model(input_ids=b.to(device), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return {L: torch.cat(v) for L, v in store.items()}


@dataclass(frozen=True)
class TrainConfig:
    """SAE training settings. ``lr`` for Adam; ``batch_size`` tokens per step; ``epochs`` passes
    over the harvested tokens."""

    d_sae: int = 4096
    arch: str = "topk"
    k: int = 32
    lr: float = 4e-4
    batch_size: int = 1024
    epochs: int = 1
    aux_coef: float = 1 / 32
    l1_coef: float = 5.0
    dead_after: int = 200_000
    seed: int = 0

    def __post_init__(self):
        if self.arch not in ("topk", "relu"):
            raise UserError(f"train arch must be 'topk' or 'relu'; got {self.arch!r}")
        if self.d_sae < 1 or self.batch_size < 1 or self.epochs < 1:
            raise ValueError(f"d_sae, batch_size, epochs must be >= 1; got {self.d_sae}, "
                             f"{self.batch_size}, {self.epochs}")
        if self.arch == "topk" and not 1 <= self.k <= self.d_sae:
            raise ValueError(f"k must be in [1, d_sae={self.d_sae}]; got {self.k}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0; got {self.lr}")


def _project_grad(sae: SAE) -> None:
    # Remove the gradient component parallel to each (unit) decoder row.
    g, w = sae.W_dec.grad, sae.W_dec.data
    if g is not None:
        g -= (g * w).sum(1, keepdim=True) * w


def train_sae(x: torch.Tensor, cfg: TrainConfig = TrainConfig(), *, layer: int | None = None,
              model_name: str | None = None, progress=None, checkpoint: str | os.PathLike | None = None,
              ) -> tuple[SAE, dict]:
    """Train an SAE on residuals ``x`` ``(N, d_in)``; returns ``(sae, stats)`` with the input
    scale folded in. ``stats``: final MSE (scaled space), fraction of variance unexplained,
    dead fraction, steps, tokens/s."""
    import time

    if x.ndim != 2 or x.shape[0] < cfg.batch_size:
        raise UserError(f"need residuals of shape (N >= batch_size={cfg.batch_size}, d_in); got {tuple(x.shape)}")
    d_in = x.shape[1]
    sq = sum(float((c.double() ** 2).sum()) for c in x.split(65536))
    scale = math.sqrt(d_in / (sq / x.shape[0]))
    sae = SAE(d_in, cfg.d_sae, cfg.arch, cfg.k, hook=None if layer is None else hook_name(layer),
              model_name=model_name, seed=cfg.seed)
    sae.b_dec.data = (sum(c.double().sum(0) for c in x.split(65536)) / x.shape[0] * scale).float()
    opt = torch.optim.Adam(sae.parameters(), lr=cfg.lr, betas=(0.9, 0.999), eps=6.25e-10)
    steps_per_epoch = x.shape[0] // cfg.batch_size
    total = steps_per_epoch * cfg.epochs
    since_fired = torch.zeros(cfg.d_sae, dtype=torch.long)
    step, ck = 0, None
    if checkpoint is not None:
        ck = Path(checkpoint) / "train_state.pt"
        if ck.is_file():
            state = torch.load(ck, weights_only=True)
            sae.load_state_dict(state["sae"])
            opt.load_state_dict(state["opt"])
            since_fired, step = state["since_fired"], int(state["step"])
    tick = progress.task(f"train SAE L{layer}", total) if progress else (lambda n=1: None)
    tick(step)
    t0, t_tokens, loss_ema = time.perf_counter(), 0, None
    while step < total:
        epoch, i = divmod(step, steps_per_epoch)
        perm = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(cfg.seed + epoch))
        xb = x[perm[i * cfg.batch_size:(i + 1) * cfg.batch_size]].float() * scale
        h = sae.pre_acts(xb)
        f = sae.activate(h)
        recon = sae.decode(f)
        err = recon - xb
        mse = err.pow(2).sum(-1).mean()
        loss = mse
        since_fired += cfg.batch_size
        since_fired[(f > 0).any(0)] = 0
        dead = since_fired > cfg.dead_after
        if cfg.arch == "topk" and dead.any():
            k_aux = min(d_in // 2, int(dead.sum()))
            hd = torch.where(dead, h, torch.full_like(h, -math.inf))
            top = hd.topk(k_aux, dim=-1)
            aux_f = torch.zeros_like(h).scatter_(-1, top.indices, torch.relu(top.values))
            aux_recon = aux_f @ sae.W_dec
            aux = (aux_recon - (-err).detach()).pow(2).sum(-1).mean()
            loss = loss + cfg.aux_coef * aux
        elif cfg.arch == "relu":
            loss = loss + cfg.l1_coef * (f * sae.W_dec.norm(dim=1)).sum(-1).mean() / d_in
        opt.zero_grad(set_to_none=True)
        loss.backward()
        _project_grad(sae)
        opt.step()
        sae.normalize_decoder_()
        step += 1
        t_tokens += cfg.batch_size
        mv = float(mse.detach())
        loss_ema = mv if loss_ema is None else 0.98 * loss_ema + 0.02 * mv
        tick(1)
        if ck is not None and (step % 200 == 0 or step == total):
            from icml26.core.io import atomic_open
            with atomic_open(ck, "wb") as fh:
                torch.save({"sae": sae.state_dict(), "opt": opt.state_dict(),
                            "since_fired": since_fired, "step": step}, fh)
    sae.fold_input_scale_(scale)
    sae.eval()
    stats = {"config": asdict(cfg), "input_scale": scale, "steps": step,
             "train_tokens": int(steps_per_epoch * cfg.batch_size), "final_mse_scaled": loss_ema,
             "mse_per_dim_scaled": None if loss_ema is None else loss_ema / d_in,
             "dead_fraction_train": float((since_fired > cfg.dead_after).float().mean()),
             "tokens_per_s": t_tokens / max(time.perf_counter() - t0, 1e-9)}
    return sae, stats


@torch.no_grad()
def evaluate_sae(sae: SAE, x: torch.Tensor, *, model=None, ids: torch.Tensor | None = None,
                 layer: int | None = None, batch_size: int = 8) -> dict:
    """Reconstruction metrics on held-out residuals ``x`` ``(N, d_in)``: ``mse`` (per token,
    summed over dims), ``explained_variance`` (1 - SSE/SST about the mean), ``l0`` (mean active
    latents), ``dead_fraction`` (never active on ``x``). With ``model``/``ids`` ``(n, T)`` also
    ``ce_clean``, ``ce_sae``, ``ce_zero`` (nats/token; positions >= 1 of block ``layer``'s
    input replaced by the reconstruction, or by zeros), ``ce_increase`` and
    ``loss_recovered = (ce_zero - ce_sae) / (ce_zero - ce_clean)``."""
    out: dict = {}
    sse = sst = l0 = 0.0
    fired = torch.zeros(sae.d_sae, dtype=torch.bool)
    mean = x.double().mean(0)
    for xb in x.split(4096):
        f = sae.encode(xb)
        r = sae.decode(f).double()
        sse += float(((r - xb.double()) ** 2).sum())
        sst += float(((xb.double() - mean) ** 2).sum())
        l0 += float((f > 0).sum())
        fired |= (f > 0).any(0).cpu()
    n = x.shape[0]
    out.update(mse=sse / n, explained_variance=1 - sse / max(sst, 1e-30), l0=l0 / n,
               dead_fraction=float((~fired).float().mean()), eval_tokens=n)
    if model is None or ids is None:
        return out
    L = sae.layer if layer is None else layer
    if L is None:
        raise UserError("evaluate_sae needs `layer` (the SAE has no hook_name)")
    block = blocks(model)[L]
    device = next(model.parameters()).device

    def ce(mode):
        def hook(module, args, kwargs):
            h = args[0] if args else kwargs["hidden_states"]
            h2 = h.clone()
            if mode == "sae":
                h2[:, 1:] = sae.decode(sae.encode(h[:, 1:].float())).to(h.dtype)
            else:
                h2[:, 1:] = 0
            if args:
                return (h2, *args[1:]), kwargs
            kwargs["hidden_states"] = h2
            return args, kwargs
        handle = block.register_forward_pre_hook(hook, with_kwargs=True) if mode != "clean" else None
        tot, cnt = 0.0, 0
        try:
            for b in ids.split(batch_size):
                b = b.to(device)
                logits = model(input_ids=b, use_cache=False).logits[:, 1:-1].float()
                tgt = b[:, 2:]
                tot += float(torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), reduction="sum"))
                cnt += tgt.numel()
        finally:
            if handle is not None:
                handle.remove()
        return tot / cnt

    # Scored positions 2..T-1 (targets of positions 1..T-2), all of which saw the spliced input.
    c0, cs, cz = ce("clean"), ce("sae"), ce("zero")
    out.update(ce_clean=c0, ce_sae=cs, ce_zero=cz, ce_increase=cs - c0,
               loss_recovered=(cz - cs) / (cz - c0) if abs(cz - c0) > 1e-6 else float("nan"))
    return out
