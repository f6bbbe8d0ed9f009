"""Calibration statistics for whitened SVD: K-FAC factors A and G, plus ASVD/FWSVD diagonals.

For each target layer with input x_t (n_in) and output gradient g_t (n_out) at token t:

* ``A = sum_t x_t x_t^T`` over every position (n_in x n_in). Layers fed the same tensor (q/k/v,
  gate/up) share one A (``a_owner``), computed once.
* ``G = sum_t g~_t g~_t^T`` (n_out x n_out), *per token* ("token-wise statistics"), over positions
  ``[cut, T - cut)`` with ``cut = floor(0.125 T)``; each token gradient's norm is clamped into
  ``[0.1 m, 10 m]`` with ``m`` the mean non-zero token-gradient norm of its sequence
  (:func:`clip_token_grads`). ``g_mode="sample"`` instead sums each sequence's gradients first
  (GFWSVD style; rank(G) <= number of sequences: the "rank collapse").
* ``act_abs`` = sum_t |x_t| (ASVD's activation scale) and ``row_fisher`` = sum over batches of
  the squared weight gradient summed over inputs (FWSVD's row importance).

Gradients come from the ordinary next-token cross-entropy (logits shifted by hand, summed over
tokens, divided by the batch size), with only the target weights requiring grad. Accumulation is
in float32 on the model's device. Collection is resumable: pass ``cache`` (a file path) and the
running sums are checkpointed there every ``save_every`` batches.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from icml26.core.errors import UserError
from icml26.lems.layers import TargetLayer, dense_weight, is_conv1d, target_layers

__all__ = ["KFACStats", "clip_token_grads", "collect_kfac_stats"]

STATS_VERSION = 1


def clip_token_grads(
    g: torch.Tensor, lo: float = 0.1, hi: float = 10.0
) -> torch.Tensor:
    """Clamp each token gradient's norm into ``[lo m, hi m]``, m = mean non-zero norm per sequence.

    ``g``: (B, T, n) float. Exact-zero tokens stay zero. Returns a new tensor of the same shape.
    """
    norms = g.norm(dim=-1)  # (B, T)
    nonzero = norms > 0
    count = nonzero.sum(-1, keepdim=True).clamp(min=1)
    mean = (norms * nonzero).sum(-1, keepdim=True) / count  # (B, 1)
    target = torch.minimum(torch.maximum(norms, lo * mean), hi * mean)
    scale = torch.where(nonzero, target / norms.clamp(min=torch.finfo(norms.dtype).tiny), 0.0)
    return g * scale.unsqueeze(-1)


@dataclass
class KFACStats:
    """Accumulated statistics. Sums, not means (every use is scale-invariant).

    ``A[owner]``: (n_in, n_in); ``a_owner[name]``: whose A a layer uses; ``G[name]``:
    (n_out, n_out); ``act_abs[name]``: (n_in,); ``row_fisher[name]``: (n_out,); counts of tokens
    behind A and G; ``batches_done`` / ``skipped`` (non-finite batches).
    """

    layers: list[TargetLayer]
    A: dict[str, torch.Tensor] = field(default_factory=dict)
    a_owner: dict[str, str] = field(default_factory=dict)
    G: dict[str, torch.Tensor] = field(default_factory=dict)
    act_abs: dict[str, torch.Tensor] = field(default_factory=dict)
    row_fisher: dict[str, torch.Tensor] = field(default_factory=dict)
    tokens_a: int = 0
    tokens_g: int = 0
    batches_done: int = 0
    skipped: int = 0
    fingerprint: str = ""

    def input_cov(self, name: str) -> torch.Tensor:
        return self.A[self.a_owner[name]]

    # -- persistence (safetensors; never pickle) ------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        from safetensors.torch import save_file

        tensors: dict[str, torch.Tensor] = {}
        for key, table in (("A", self.A), ("G", self.G), ("act", self.act_abs), ("fis", self.row_fisher)):
            for name, t in table.items():
                tensors[f"{key}::{name}"] = t.detach().cpu().contiguous()
        meta = {
            "version": str(STATS_VERSION), "fingerprint": self.fingerprint,
            "tokens_a": str(self.tokens_a), "tokens_g": str(self.tokens_g),
            "batches_done": str(self.batches_done), "skipped": str(self.skipped),
            "a_owner": ";".join(f"{k}={v}" for k, v in self.a_owner.items()),
        }
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        save_file(tensors, str(tmp), metadata=meta)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike, layers: list[TargetLayer], device="cpu") -> KFACStats:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt", device=str(device)) as f:
            meta = f.metadata()
            if meta.get("version") != str(STATS_VERSION):
                raise UserError(f"{path}: statistics version {meta.get('version')} != {STATS_VERSION}")
            st = cls(layers=layers, fingerprint=meta["fingerprint"], tokens_a=int(meta["tokens_a"]),
                     tokens_g=int(meta["tokens_g"]), batches_done=int(meta["batches_done"]),
                     skipped=int(meta["skipped"]))
            st.a_owner = dict(kv.split("=", 1) for kv in meta["a_owner"].split(";") if kv)
            tables = {"A": st.A, "G": st.G, "act": st.act_abs, "fis": st.row_fisher}
            for key in f.keys():  # noqa: SIM118 - safe_open has keys(), not iteration
                kind, name = key.split("::", 1)
                tables[kind][name] = f.get_tensor(key)
        return st


def _fingerprint(model: nn.Module, layers: list[TargetLayer], batches: list[torch.Tensor],
                 settings: dict) -> str:
    h = hashlib.sha256(repr(sorted(settings.items())).encode())
    for layer in layers:
        w = dense_weight(model.get_submodule(layer.name)).detach()
        h.update(f"{layer.name}:{tuple(w.shape)}:{float(w.float().sum()):.6e}".encode())
    for b in batches:
        h.update(b.cpu().numpy().tobytes())
    return h.hexdigest()[:20]


def collect_kfac_stats(
    model: nn.Module,
    batches: list[torch.Tensor],
    *,
    layers: list[TargetLayer] | None = None,
    device: str | torch.device | None = None,
    token_cut: float = 0.125,
    clip: tuple[float, float] = (0.1, 10.0),
    g_mode: str = "token",
    cache: str | os.PathLike | None = None,
    save_every: int = 4,
    progress=None,
) -> KFACStats:
    """Run forward+backward on ``batches`` (each LongTensor (b, T)) and accumulate statistics.

    ``layers`` defaults to :func:`target_layers`. With ``cache`` set, an existing checkpoint with
    the same fingerprint (weights, batches, settings) is resumed (or returned when complete).
    The model's ``requires_grad`` flags are restored afterwards. Batches with non-finite logits
    are skipped and counted; if all are skipped, UserError.
    """
    if g_mode not in ("token", "sample"):
        raise ValueError(f"g_mode must be 'token' or 'sample'; got {g_mode!r}")
    if not 0 <= token_cut < 0.5:
        raise ValueError(f"token_cut must be in [0, 0.5); got {token_cut}")
    if not batches:
        raise UserError("collect_kfac_stats needs at least one calibration batch")
    layers = layers if layers is not None else target_layers(model)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    settings = {"token_cut": token_cut, "clip": tuple(clip), "g_mode": g_mode, "v": STATS_VERSION}
    fp = _fingerprint(model, layers, batches, settings)
    if cache is not None and Path(cache).is_file():
        st = KFACStats.load(cache, layers, device=device)
        if st.fingerprint != fp:
            st = KFACStats(layers=layers, fingerprint=fp)
    else:
        st = KFACStats(layers=layers, fingerprint=fp)
    if st.batches_done >= len(batches):
        return st

    mods = {layer.name: model.get_submodule(layer.name) for layer in layers}
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    for p in model.parameters():
        p.requires_grad_(False)
    for m in mods.values():
        m.weight.requires_grad_(True)

    step_inputs: list[tuple[torch.Tensor, str]] = []
    pending: dict[str, torch.Tensor] = {}  # per-batch G contributions (summed after finite check)

    def fwd_hook(name):
        def hook(mod, args, out):
            x = args[0].detach()
            owner = next((o for t, o in step_inputs if t is args[0]), None)
            if owner is None:
                step_inputs.append((args[0], name))
                xf = x.reshape(-1, x.shape[-1]).to(device, torch.float32)
                pending[f"A::{name}"] = xf.T @ xf
                pending[f"act::{name}"] = xf.abs().sum(0)
                owner = name
            else:
                pending[f"act::{name}"] = pending[f"act::{owner}"]
            st.a_owner.setdefault(name, owner)
            if out.requires_grad:
                out.register_hook(grad_hook(name))
        return hook

    def grad_hook(name):
        def hook(grad):
            g = grad.detach().to(device, torch.float32)  # (B, T, n_out)
            t = g.shape[1]
            cut = math.floor(token_cut * t)
            g = g[:, cut : t - cut]
            if g_mode == "token":
                g = clip_token_grads(g, *clip).reshape(-1, g.shape[-1])
            else:
                g = g.sum(1)
            pending[f"G::{name}"] = g.T @ g
            pending[f"ntok_g::{name}"] = torch.tensor(g.shape[0] if g_mode == "token" else 0)
        return hook

    handles = [mods[n].register_forward_hook(fwd_hook(n)) for n in mods]
    order = range(st.batches_done, len(batches))
    if progress is not None:
        order = progress.track(order, total=len(batches) - st.batches_done, description="K-FAC statistics")
    try:
        for i in order:
            ids = batches[i].to(next(model.parameters()).device)
            step_inputs.clear()
            pending.clear()
            logits = model(input_ids=ids).logits
            if not torch.isfinite(logits).all():
                st.skipped += 1
                st.batches_done = i + 1
                continue
            loss = nn.functional.cross_entropy(
                logits[:, :-1].float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                reduction="sum") / ids.shape[0]
            loss.backward()
            step_inputs.clear()
            if not all(torch.isfinite(v).all() for v in pending.values()):
                st.skipped += 1
            else:
                _accumulate(st, pending, mods, ids, device)
            for m in mods.values():
                m.weight.grad = None
            st.batches_done = i + 1
            if cache is not None and (st.batches_done % save_every == 0 or st.batches_done == len(batches)):
                st.save(cache)
    finally:
        for h in handles:
            h.remove()
        for n, p in model.named_parameters():
            p.requires_grad_(flags[n])
            p.grad = None
    if st.skipped >= len(batches) or not st.G:
        raise UserError(f"all {len(batches)} calibration batches gave non-finite logits or gradients")
    return st


def _accumulate(st: KFACStats, pending: dict, mods: dict, ids: torch.Tensor, device) -> None:
    for key, val in pending.items():
        kind, name = key.split("::", 1)
        if kind == "ntok_g":
            continue
        table = {"A": st.A, "G": st.G, "act": st.act_abs}[kind]
        table[name] = table[name] + val if name in table else val.clone()
    st.tokens_a += ids.numel()
    first = next(iter(mods))
    st.tokens_g += int(pending.get(f"ntok_g::{first}", torch.tensor(0)))
    for name, m in mods.items():
        if m.weight.grad is None:
            continue
        gw = m.weight.grad.t() if is_conv1d(m) else m.weight.grad  # (n_out, n_in)
        fis = gw.detach().to(device, torch.float32).pow(2).sum(1)
        st.row_fisher[name] = st.row_fisher[name] + fis if name in st.row_fisher else fis
