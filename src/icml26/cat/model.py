"""Apply CAT and its baselines to a whole network: calibration statistics, transforms per
input group, fake quantization, fusion, per-layer SQNR, save/load.

An *input group* is the set of linears that read the same tensor (Llama: {q,k,v}, o, {gate,up},
down); it is found by running one short forward and comparing input tensors, so any architecture
made of ``nn.Linear`` works. Transforms are applied online (``T x`` before the activation
quantizer, ``W T^{-1}`` folded into the consumer weights); with ``fuse=True`` diagonal transforms
(SmoothQuant) are folded into the producer where that is exact: the RMSNorm gain before {q,k,v}
and {gate,up}, and ``up_proj``'s rows before ``down_proj``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from icml26.cat.quant import QuantConfig, QuantLinear
from icml26.cat.sqnr import SQNRStats
from icml26.cat.transforms import (
    BlockTransform,
    cat_transform,
    hadamard,
    hadamard_transform,
    smoothquant_transform,
)
from icml26.core.hooks import forward_with_pre_hooks

__all__ = [
    "InputGroup",
    "find_groups",
    "collect_covariances",
    "build_transforms",
    "quantize_model_",
    "apply_transform",
    "fake_quantize",
    "layer_sqnr",
    "METHODS",
    "save_quantized",
    "load_quantized",
    "group_hessians",
]

METHODS = ("none", "smoothquant", "hadamard", "cat")


@dataclass
class InputGroup:
    """Linears sharing one input. ``sigma``: (d, d) float64 ``E[x x^T]``; ``absmax``: (d,)."""

    names: list[str]
    dim: int
    sigma: torch.Tensor | None = None
    absmax: torch.Tensor | None = None
    n_tokens: int = 0


def _linears(model: nn.Module, skip: Sequence[str]) -> dict[str, nn.Linear]:
    return {
        n: m
        for n, m in model.named_modules()
        if isinstance(m, nn.Linear) and not any(n == s or n.endswith("." + s) for s in skip)
    }


@torch.no_grad()
def find_groups(
    model: nn.Module, probe: torch.Tensor, skip: Sequence[str] = ("lm_head",)
) -> list[InputGroup]:
    """Group the model's linears (except ``skip``) by identical input tensor, using one forward
    on ``probe`` (1, L) token ids. Order follows the forward pass."""
    linears = _linears(model, skip)
    seen: list[tuple[torch.Tensor, str]] = []  # keep inputs alive so ids stay unique
    handles = [
        m.register_forward_pre_hook(lambda mod, args, n=n: seen.append((args[0], n)))
        for n, m in linears.items()
    ]
    try:
        model(input_ids=probe.to(next(model.parameters()).device))
    finally:
        for h in handles:
            h.remove()
    groups: dict[int, InputGroup] = {}
    for tensor, name in seen:
        g = groups.setdefault(id(tensor), InputGroup([], tensor.shape[-1]))
        if name not in g.names:
            g.names.append(name)
    return list(groups.values())


@torch.no_grad()
def collect_covariances(
    model: nn.Module,
    batches: Iterable[torch.Tensor],
    groups: list[InputGroup] | None = None,
    skip: Sequence[str] = ("lm_head",),
    progress=None,
) -> list[InputGroup]:
    """Accumulate ``Sigma = X^T X / N`` (float64) and per-channel max|x| for every input group
    over calibration ``batches`` (each (B, L) token ids). Returns the groups, filled in."""
    batches = list(batches)
    if not batches:
        raise ValueError("collect_covariances needs at least one calibration batch")
    if groups is None:
        groups = find_groups(model, batches[0][:1, : min(16, batches[0].shape[1])], skip)
    mods = dict(model.named_modules())
    sums = [torch.zeros(g.dim, g.dim, dtype=torch.float64) for g in groups]
    amax = [torch.zeros(g.dim, dtype=torch.float64) for g in groups]
    counts = [0] * len(groups)

    def hook(i):
        def f(mod, args):
            x = args[0].detach().reshape(-1, groups[i].dim).to("cpu", torch.float64)
            sums[i].addmm_(x.T, x)
            amax[i] = torch.maximum(amax[i], x.abs().amax(0))
            counts[i] += x.shape[0]

        return f

    forward_with_pre_hooks(
        model,
        batches,
        {mods[g.names[0]]: hook(i) for i, g in enumerate(groups)},
        progress=progress,
        description="calibrate",
    )
    for i, g in enumerate(groups):
        g.sigma, g.absmax, g.n_tokens = sums[i] / counts[i], amax[i], counts[i]
    return groups


def _largest_pow2_divisor(d: int) -> int:
    return d & -d


def build_transforms(
    model: nn.Module,
    groups: list[InputGroup],
    method: str,
    *,
    block: int | None = 64,
    damp: float = 1e-3,
    alpha: float = 0.5,
    cat_hadamard: bool = True,
    seed: int = 0,
    progress=None,
) -> dict[str, BlockTransform | None]:
    """One transform per input group, keyed by every linear name of the group.

    method: ``"none"``; ``"smoothquant"`` (diag, ``alpha``); ``"hadamard"`` (randomized, order d
    where a Sylvester x Paley matrix exists, else the largest power-of-two block dividing d);
    ``"cat"`` (block ``block``, ``None`` = full; damping ``damp``; Hadamard ``cat_hadamard``).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    mods = dict(model.named_modules())
    out: dict[str, BlockTransform | None] = {}
    it = groups if progress is None else progress.track(groups, len(groups), f"{method} transforms")
    for gi, g in enumerate(it):
        weights = [mods[n].weight.detach().to("cpu", torch.float64) for n in g.names]
        t: BlockTransform | None = None
        if method in ("smoothquant", "cat") and g.sigma is None:
            raise ValueError(f"{method} needs calibration statistics; run collect_covariances")
        if method == "smoothquant":
            t = smoothquant_transform(weights, g.absmax, alpha)
        elif method == "hadamard":
            try:
                hadamard(g.dim)
                hb = None
            except ValueError:
                hb = _largest_pow2_divisor(g.dim)
            t = hadamard_transform(g.dim, hb, seed=seed + gi)
        elif method == "cat":
            b = block if block is None or block <= g.dim else None
            if g.n_tokens < 2 * (g.dim if b is None else b):
                raise ValueError(
                    f"{g.names[0]}: {g.n_tokens} calibration tokens, need at least 2 x block "
                    f"({2 * (g.dim if b is None else b)})"
                )
            t = cat_transform(
                weights, g.sigma, b, damp, cat_hadamard, seed=seed + gi, layer=g.names[0]
            )
        for n in g.names:
            out[n] = t
    return out


def group_hessians(groups: list[InputGroup]) -> dict[str, tuple[torch.Tensor, int]]:
    """``{linear name: (Sigma (d, d) float64, n_tokens)}`` from filled input groups: the GPTQ
    Hessian of every linear in the untransformed basis (``X^T X / N``; the scale is irrelevant)."""
    out = {}
    for g in groups:
        if g.sigma is None:
            raise ValueError("group_hessians needs calibration statistics; run collect_covariances")
        for n in g.names:
            out[n] = (g.sigma, g.n_tokens)
    return out


def _set_module(model: nn.Module, name: str, new: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, new)


@torch.no_grad()
def _fuse_diagonal(model: nn.Module, name: str, t: BlockTransform) -> bool:
    """Fold diag T into the producer of ``name``'s input when exact (Llama-style names); the
    product runs on the producer's device (T's blocks may live on the CPU)."""
    diag = t.blocks.reshape(-1)
    parent, _, leaf = name.rpartition(".")
    block = parent.rpartition(".")[0]
    producers = {
        "q_proj": f"{block}.input_layernorm",
        "gate_proj": f"{block}.post_attention_layernorm",
        "down_proj": f"{parent}.up_proj",
    }
    if leaf not in producers:
        return False
    try:
        prod = model.get_submodule(producers[leaf])
    except AttributeError:
        return False
    w = prod.weight
    diag = diag.to(w.device)
    if w.dim() == 1 and w.shape[0] == diag.shape[0]:  # RMSNorm gain
        w.copy_((w.double() * diag).to(w.dtype))
    elif w.dim() == 2 and w.shape[0] == diag.shape[0]:  # up_proj rows
        w.copy_((w.double() * diag[:, None]).to(w.dtype))
        if getattr(prod, "w_scales", None) is not None:  # already quantized: rows keep codes
            prod.w_scales = prod.w_scales * diag.to("cpu", torch.float64)[:, None]
        if getattr(prod, "bias", None) is not None:
            prod.bias.copy_((prod.bias.double() * diag).to(prod.bias.dtype))
    else:
        return False
    return True


@torch.no_grad()
def quantize_model_(
    model: nn.Module,
    transforms: dict[str, BlockTransform | None],
    config: QuantConfig,
    *,
    fuse: bool = False,
    skip: Sequence[str] = ("lm_head",),
    hessians: dict[str, tuple[torch.Tensor, int]] | None = None,
    gptq_damp: float = 0.01,
) -> nn.Module:
    """Replace every linear (except ``skip``) with a :class:`QuantLinear` holding
    ``Q_w(W T^{-1})`` and the online T (from ``transforms``, None/absent = identity); in place.

    fuse: fold diagonal transforms into the producer where exact (see module docstring); the
    linears of a fused group then carry no online transform. Call once per model.
    hessians: ``{name: (H, n_tokens)}`` with H (d, d) the second moment of the linear's input as
    the model is now (:func:`group_hessians`); given, weights are quantized with GPTQ under
    ``T H T^T`` (the transformed input's) instead of RTN, with damping ``gptq_damp``. A linear
    missing from it raises; fewer than d tokens raises naming the linear.
    """
    from icml26.cat.gptq import gptq_codes

    dtype = next(model.parameters()).dtype
    linears = _linears(model, skip)
    fused: dict[int, bool] = {}
    gptq_done: dict[tuple[int, int], dict] = {}  # GPTQ once per (transform, Hessian)
    for name, lin in linears.items():
        t = transforms.get(name)
        if t is not None and t.out_rotation is not None:
            raise ValueError(
                f"{name}: this transform also rotates the layer's outputs (QuaRot's per-layer "
                "view, for SQNR only); rotate the model with quarot_rotate_ instead"
            )
        online = t
        if t is not None and fuse and t.block == 1:
            key = id(t)
            if key not in fused:
                members = [n for n, tt in transforms.items() if tt is t]
                fused[key] = any(_fuse_diagonal(model, n, t) for n in members[:1])
            if fused[key]:
                online = None
        w = lin.weight.detach().to(torch.float64)
        if t is not None:
            w = t.inverse_into(w)
        quantized = None
        if hessians is not None and config.w_bits is not None:
            if name not in hessians:
                raise ValueError(f"{name}: GPTQ needs its input Hessian; none given for this layer")
            h, n_tok = hessians[name]
            key = (id(t), id(h))
            if key not in gptq_done:  # every linear with this input and transform, stacked
                members = [n for n in linears if n in hessians and id(hessians[n][0]) == id(h)
                           and id(transforms.get(n)) == id(t)]
                ws = [linears[n].weight.detach().to("cpu", torch.float64) for n in members]
                if t is not None:
                    ws = [t.inverse_into(x) for x in ws]
                    td = t.dense().to("cpu")
                    h = td @ h.to("cpu", torch.float64) @ td.T  # the transformed input's moment
                codes, scales = gptq_codes(
                    torch.cat(ws).cpu(), h, config.w_bits, config.w_gran, config.w_group_size,
                    damp=gptq_damp, n_tokens=n_tok, layer=name,
                )
                rows = [x.shape[0] for x in ws]
                parts = zip(codes.split(rows), scales.split(rows), strict=True)
                gptq_done[key] = dict(zip(members, parts,
                                          strict=True))
            quantized = gptq_done[key][name]
        q = QuantLinear(
            w.to(lin.weight.device),
            None if lin.bias is None else lin.bias.detach(),
            # a copy per linear (as the cast to a narrower dtype makes anyway): linears sharing
            # one transform must not share the buffer, or save_model keeps only one name of it
            None
            if online is None
            else online.blocks.to(device=lin.weight.device, dtype=dtype, copy=True),
            config,
            dtype,
            quantized=quantized,
        )
        q.transform_kind = (
            "none" if t is None else t.kind + ("" if online is not None else "-fused")
        )
        _set_module(model, name, q)
    return model


def apply_transform(model, transforms, fuse: bool = True, skip=("lm_head",)):
    """Insert transforms without quantization (function-preserving up to rounding); in place."""
    return quantize_model_(model, transforms, QuantConfig(None, None), fuse=fuse, skip=skip)


def fake_quantize(
    model,
    w_bits=4,
    a_bits=4,
    w_gran="channel",
    a_gran="token",
    w_group_size=None,
    transforms=None,
    fuse: bool = True,
    skip=("lm_head",),
    hessians=None,
):
    """Fake-quantize every linear at W``w_bits``A``a_bits`` (RTN, or GPTQ with ``hessians``:
    see :func:`quantize_model_`; the same quantizer in every arm), with optional
    ``transforms``; in place."""
    cfg = QuantConfig(w_bits, a_bits, w_gran, a_gran, w_group_size)
    return quantize_model_(model, transforms or {}, cfg, fuse=fuse, skip=skip, hessians=hessians)


@torch.no_grad()
def layer_sqnr(
    model: nn.Module,
    batches: Iterable[torch.Tensor],
    arms: Mapping[str, dict[str, BlockTransform | None] | Callable[[], dict]],
    w_bits: int | None,
    a_bits: int | None,
    *,
    skip: Sequence[str] = ("lm_head",),
    dtype: torch.dtype = torch.float32,
    progress=None,
) -> list[dict]:
    """Per-linear SQNR decomposition for each arm on held-out ``batches`` of the unquantized
    model's own inputs. Returns rows ``{layer, arm, <SQNRStats.terms()>}`` (arm-major).

    One forward pass per arm: only that arm's statistics (two weight copies per linear) and
    transforms are alive at a time, so memory does not grow with the number of arms (nine arms
    at once held ~15 GB for SmolLM2). An arm's value may be a zero-argument callable that builds
    its ``{linear: transform}`` dict when its pass starts; it is dropped after the pass. The
    inputs each arm sees are the same unquantized activations, so the rows equal one shared
    pass's."""
    linears = _linears(model, skip)
    batches = list(batches)
    rows: list[dict] = []
    for arm, transforms in arms.items():
        tr = transforms() if callable(transforms) else transforms
        stats = {
            n: SQNRStats(lin.weight.detach().cpu(), w_bits, a_bits, tr.get(n), dtype)
            for n, lin in linears.items()
        }
        del tr
        forward_with_pre_hooks(
            model,
            batches,
            {m: _sqnr_hook(stats[n]) for n, m in linears.items()},
            progress=progress,
            description=f"layer SQNR ({arm})",
        )
        rows += [{"layer": n, "arm": arm, **s.terms()} for n, s in stats.items()]
        del stats
    return rows


def _sqnr_hook(stats: SQNRStats):
    def f(mod, args):
        stats.update(args[0].detach().cpu())

    return f


def save_quantized(model: nn.Module, out: Path, manifest: dict, overwrite: bool = False) -> Path:
    """Write ``model.safetensors`` (every parameter and buffer, transforms included) and
    ``cat-manifest.json`` (quantized module names, configs, transform kinds, ``manifest``)
    into a new folder ``out`` atomically (temp folder + rename)."""
    import os
    import shutil
    import tempfile

    from safetensors.torch import save_model

    out = Path(out)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists; pass overwrite=True (CLI: --overwrite)")
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent or "."))
    modules = {
        n: {
            "config": m.config.to_dict(),
            "transform": m.transform_kind,
            "blocks": None if m.blocks is None else list(m.blocks.shape),
        }
        for n, m in model.named_modules()
        if isinstance(m, QuantLinear)
    }
    save_model(model, str(tmp / "model.safetensors"))
    (tmp / "cat-manifest.json").write_text(json.dumps({**manifest, "modules": modules}, indent=1))
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out


def load_quantized(folder: Path, model: nn.Module | None = None, device: str = "cpu") -> nn.Module:
    """Rebuild a model written by :func:`save_quantized` on top of ``model`` (the same base
    architecture); in place, returns it. ``model=None`` loads the base named in the manifest
    (``model``, ``dtype``) with :func:`icml26.core.lm.load_lm` on ``device``. A manifest with
    ``residual_rotation`` (QuaRot) unties the base's LM head before loading."""
    from safetensors.torch import load_model

    folder = Path(folder)
    man_path = folder / "cat-manifest.json"
    if not man_path.exists():
        raise FileNotFoundError(f"{man_path} not found: not a folder written by save_quantized")
    man = json.loads(man_path.read_text())
    if model is None:
        from icml26.core.lm import load_lm
        from icml26.core.torchutil import parse_dtype

        model, _ = load_lm(
            man.get("model"), dtype=parse_dtype(man.get("dtype", "float32")), device=device
        )
    if man.get("residual_rotation"):
        from icml26.cat.quarot import untie_head_

        untie_head_(model)
    dtype = next(model.parameters()).dtype
    for name, spec in man["modules"].items():
        lin = model.get_submodule(name)
        cfg = QuantConfig(**spec["config"])
        blocks = (
            None if spec["blocks"] is None else torch.zeros(spec["blocks"], device=lin.weight.device)
        )
        bias = None if getattr(lin, "bias", None) is None else lin.bias.detach()
        q = QuantLinear(lin.weight.detach(), bias, blocks, QuantConfig(None, None), dtype)
        q.config = cfg
        q.transform_kind = spec["transform"]
        _set_module(model, name, q)
    load_model(model, str(folder / "model.safetensors"), strict=True)
    return model
