"""``QuartetIILinear`` and NVIDIA's NVFP4 recipe as drop-in ``nn.Linear`` replacements.

Both are simulated ("fake-quantized"): operands are quantized to NVFP4 bit-exactly and the GEMMs
run on their dequantized float32 values, which is what an NVFP4 tensor-core GEMM computes up to
accumulation order. Bias is added in high precision and its gradient (a sum of dY) is exact.

Quartet II (tokens T = product of the leading dims of X):

- forward   ``Y = Q_rtn(X) Q_rtn(W)^T``; 1x16 blocks along ``in``; 4/6 block scales by default;
- ``dX = dY W``: RHT along ``out`` on dY and on the *saved* Q(W)^T, MS-EDEN both, multiply;
- ``dW = dY^T X``: RHT along tokens on dY^T and the saved Q(X)^T (re-quantized), MS-EDEN both.

NVIDIA's recipe (TE ``NVFP4BlockScaling``, as re-implemented in the Quartet II repository):

- forward RTN, 1x16 blocks for X and **16x16** tiles for W;
- ``dX = SR(dY) Q(W)`` (SR with scale override 17/16, no rotation, Q(W) reused: 16x16 tiles are
  valid in both orientations);
- ``dW = SR(RHT16(dY^T)) RTN(RHT16(X^T))^T`` with a 16-point RHT along tokens, X unquantized.

Token counts that are not a multiple of the rotation size are zero-padded along tokens (zeros add
nothing to ``dY^T X``). Random signs are drawn from the layer's own generator at every backward
call, one draw per GEMM, shared by its two operands.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch import nn

from icml26.quartet2.backends import BACKENDS, check_backend, kernel_linear
from icml26.quartet2.eden import (
    _pad_k,
    check_hadamard_dim,
    ms_eden_values,
    random_signs,
    rht,
)
from icml26.quartet2.nvfp4 import BLOCK, fake_quant, quantize_nvfp4

__all__ = ["Quartet2Config", "QuartetIILinear", "NvidiaNVFP4Linear", "convert_to_quartet2", "RECIPES"]

log = logging.getLogger(__name__)
RECIPES = ("quartet2", "nvidia")
CONFIG_VERSION = 1


@dataclass(frozen=True)
class Quartet2Config:
    """Settings of a quantized linear layer.

    recipe: "quartet2" or "nvidia". hadamard_dim: RHT size h for Quartet II's backward (paper
    sweeps 128; the official class default is 32); NVIDIA's wgrad RHT is fixed at 16.
    four_over_six: 4/6 block scales in Quartet II's forward. delayed_amax: MS-EDEN reuses the
    previous step's rotated amax for the tensor scale. disable_forward_quant /
    disable_backward_quant: switch the quantizers off (ablations, tests). seed: base seed of the
    layers' generators (layer i uses seed + i). check_finite: raise on NaN/inf operands (the
    only setting that reads a value back to the host).
    backend: "simulate" (this package's bit-exact simulation, the reference), "te" (Transformer
    Engine's NVFP4BlockScaling) or "torchao" (torchao's NVFP4 training linear); the kernel
    backends implement NVIDIA's recipe on Blackwell GPUs, and :func:`convert_to_quartet2` swaps
    them in (see :mod:`icml26.quartet2.backends`; a missing library, CUDA or GPU capability is a
    UserError naming it). compile: run the simulated quantizers through ``torch.compile``
    (3-7x faster quantizers once compiled, same bits as eager on every input tried; each new
    shape compiles once, ~1 min on a 2-core CPU, so it pays off for long runs on fixed shapes).
    """

    recipe: str = "quartet2"
    hadamard_dim: int = 128
    four_over_six: bool = True
    delayed_amax: bool = False
    disable_forward_quant: bool = False
    disable_backward_quant: bool = False
    seed: int = 0
    check_finite: bool = False
    backend: str = "simulate"
    compile: bool = False

    def __post_init__(self) -> None:
        if self.recipe not in RECIPES:
            raise ValueError(f"`recipe` must be one of {RECIPES}; got {self.recipe!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"`backend` must be one of {BACKENDS}; got {self.backend!r}")
        check_hadamard_dim(self.hadamard_dim)

    @property
    def backward_dim(self) -> int:
        return self.hadamard_dim if self.recipe == "quartet2" else BLOCK

    def to_dict(self) -> dict:
        return {"version": CONFIG_VERSION, **asdict(self)}

    @classmethod
    def from_dict(cls, d: dict) -> Quartet2Config:
        d = dict(d)
        version = d.pop("version", CONFIG_VERSION)
        if version != CONFIG_VERSION:
            raise ValueError(f"Quartet2Config version {version} is not {CONFIG_VERSION}")
        return cls(**d)


class _Ctx:
    """Per-layer mutable state the autograd function needs: generator and delayed amaxes."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._gens: dict[str, torch.Generator] = {}
        self.amax: dict[str, torch.Tensor] = {}

    def generator(self, device: torch.device) -> torch.Generator:
        key = str(device)
        if key not in self._gens:
            self._gens[key] = torch.Generator(device=device).manual_seed(self.seed)
        return self._gens[key]


_COMPILED: dict[str, Callable] = {}


def _compiled(fn: Callable) -> Callable:
    """``torch.compile(fn)`` made once per function (static shapes: one graph per shape)."""
    if fn.__name__ not in _COMPILED:
        _COMPILED[fn.__name__] = torch.compile(fn, dynamic=False)
    return _COMPILED[fn.__name__]


def _fq(cfg: Quartet2Config, x: torch.Tensor, **kw) -> torch.Tensor:
    """``fake_quant`` eager, or compiled with its SR noise drawn first from the same generator
    (the same uniforms in the same order as the eager draw, hence the same bits)."""
    if not cfg.compile:
        return fake_quant(x, **kw)
    gen = kw.pop("generator", None)
    if kw.get("mode") == "sr":
        kw["noise"] = torch.rand(x.shape, generator=gen, device=x.device)
    return _compiled(fake_quant)(x, **kw)


def _eden(x: torch.Tensor, signs, state: _Ctx, cfg: Quartet2Config, key: str, gen) -> torch.Tensor:
    """MS-EDEN of ``x`` (rows, K) in the rotated basis, with optional delayed amax."""
    amax = state.amax.get(key) if cfg.delayed_amax else None
    if cfg.compile:  # the scales' SR noise drawn first: one uniform per 16-block, as eager does
        noise = torch.rand(x.numel() // BLOCK, generator=gen, device=x.device)
        out = _compiled(ms_eden_values)(x, signs, amax=amax, scale_noise=noise)
    else:
        out = ms_eden_values(x, signs, amax=amax, generator=gen)
    if cfg.delayed_amax:  # next call uses this call's fresh amax of the rotated tensor
        state.amax[key] = rht(x, signs).abs().max().detach()
    return out


class _NVFP4LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(fctx, x2, weight, cfg: Quartet2Config, state: _Ctx):
        # x2: (T, in) float32, weight: (out, in) float32
        fq = not cfg.disable_forward_quant
        if cfg.recipe == "quartet2":
            mode = "four_over_six" if cfg.four_over_six else "rtn"
            xq = _fq(cfg, x2, mode=mode, check_finite=cfg.check_finite, name="input") if fq else x2
            wq = _fq(cfg, weight, mode=mode, check_finite=cfg.check_finite, name="weight") if fq else weight
            fctx.save_for_backward(xq, wq)  # Quartet II reuses Q(X), Q(W) in the backward
        else:
            xq = _fq(cfg, x2, check_finite=cfg.check_finite, name="input") if fq else x2
            wq = (_fq(cfg, weight, block=(BLOCK, BLOCK), check_finite=cfg.check_finite, name="weight")
                  if fq else weight)
            fctx.save_for_backward(x2, wq)  # NVIDIA re-quantizes the original X for wgrad
        fctx.cfg, fctx.state = cfg, state
        return xq @ wq.T

    @staticmethod
    def backward(fctx, grad_out):
        with torch.autocast(device_type=grad_out.device.type, enabled=False):
            return _NVFP4LinearFn._backward(fctx, grad_out)

    @staticmethod
    def _backward(fctx, grad_out):
        x_saved, wq = fctx.saved_tensors
        cfg: Quartet2Config = fctx.cfg
        state: _Ctx = fctx.state
        dy = grad_out.float()  # (T, out)
        if cfg.disable_backward_quant:
            return dy @ wq, dy.T @ x_saved, None, None
        if cfg.check_finite and not bool(torch.isfinite(dy).all()):
            from icml26.core.errors import UserError

            raise UserError(f"grad_output has {int((~torch.isfinite(dy)).sum())} non-finite values")
        gen = state.generator(dy.device)
        h = cfg.backward_dim
        t = dy.shape[0]
        if cfg.recipe == "quartet2":
            s1 = random_signs(h, gen, dy.device)  # dX GEMM: rotate along out
            dx = _eden(dy, s1, state, cfg, "dy", gen) @ _eden(wq.T, s1, state, cfg, "wt", gen).T
            s2 = random_signs(h, gen, dy.device)  # dW GEMM: rotate along tokens (zero-padded)
            dyt, xt = _pad_k(dy.T, h), _pad_k(x_saved.T, h)
            dw = _eden(dyt, s2, state, cfg, "dyt", gen) @ _eden(xt, s2, state, cfg, "xt", gen).T
        else:
            dx = _fq(cfg, _pad_k(dy, BLOCK), mode="sr", scale_override=17 / 16,
                     generator=gen)[:, : dy.shape[1]] @ wq
            s2 = random_signs(h, gen, dy.device)
            dyt, xt = rht(_pad_k(dy.T, h), s2), rht(_pad_k(x_saved.T, h), s2)
            dw = (_fq(cfg, dyt, mode="sr", scale_override=17 / 16, generator=gen)
                  @ _fq(cfg, xt, mode="rtn").T)
        assert dx.shape == (t, wq.shape[1]) and dw.shape == wq.shape
        return dx, dw, None, None


class _QuantLinearBase(nn.Linear):
    """``nn.Linear`` whose matmul goes through the NVFP4 autograd function of ``config``."""

    _recipe = "quartet2"

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 config: Quartet2Config | None = None, name: str = "", device=None, dtype=None,
                 **overrides) -> None:
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        cfg = config or Quartet2Config(recipe=self._recipe)
        if overrides:
            cfg = Quartet2Config(**{**asdict(cfg), **overrides})
        if cfg.recipe != self._recipe:
            cfg = Quartet2Config(**{**asdict(cfg), "recipe": self._recipe})
        label = f"{type(self).__name__} {name or ''}".strip()
        for dim_name, dim in (("in_features", in_features), ("out_features", out_features)):
            if dim % BLOCK:
                raise ValueError(f"{label}: {dim_name}={dim} is not a multiple of {BLOCK} "
                                 f"(NVFP4 blocks); got ({in_features}, {out_features})")
        if cfg.recipe == "quartet2" and out_features % cfg.hadamard_dim:
            raise ValueError(f"{label}: out_features={out_features} is not a multiple of "
                             f"hadamard_dim={cfg.hadamard_dim} (the dX rotation runs along out)")
        if cfg.backend != "simulate":
            check_backend(cfg.backend, cfg.recipe, device if device not in (None, "meta") else None)
            raise ValueError(f"{label} is the simulation; backend={cfg.backend!r} swaps in the "
                             "kernel's own module: use convert_to_quartet2(model, config=...)")
        self.config = cfg
        self._state = _Ctx(cfg.seed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out_dtype = x.dtype
        if torch.is_autocast_enabled(x.device.type):
            out_dtype = torch.get_autocast_dtype(x.device.type)
        lead = x.shape[:-1]
        with torch.autocast(device_type=x.device.type, enabled=False):
            y = _NVFP4LinearFn.apply(x.reshape(-1, self.in_features).float(), self.weight.float(),
                                     self.config, self._state)
            if self.bias is not None:
                y = y + self.bias.float()
        return y.reshape(*lead, self.out_features).to(out_dtype)

    def extra_repr(self) -> str:
        c = self.config
        return (f"{super().extra_repr()}, recipe={c.recipe}, hadamard_dim={c.backward_dim}, "
                f"four_over_six={c.four_over_six if c.recipe == 'quartet2' else False}")

    @classmethod
    def from_linear(cls, linear: nn.Linear, config: Quartet2Config | None = None, name: str = ""):
        """A quantized layer sharing ``linear``'s parameters (same tensors, not copies)."""
        new = cls(linear.in_features, linear.out_features, bias=linear.bias is not None,
                  config=config, name=name, device="meta")
        new.weight = linear.weight
        new.bias = linear.bias
        return new


class QuartetIILinear(_QuantLinearBase):
    """Quartet II linear layer: RTN (4/6) NVFP4 forward, MS-EDEN + RHT NVFP4 backward.

    ``QuartetIILinear(in, out, bias=True, hadamard_dim=128, four_over_six=True,
    delayed_amax=False, disable_forward_quant=False, disable_backward_quant=False, seed=0)``.
    Input (..., in) in any float dtype, output (..., out) in the input's dtype (or the autocast
    dtype); all quantization and GEMMs run in float32. ``in``/``out`` must be multiples of 16,
    ``out`` a multiple of ``hadamard_dim``.
    """

    _recipe = "quartet2"


class NvidiaNVFP4Linear(_QuantLinearBase):
    """NVIDIA's NVFP4 training recipe (RTN forward with 16x16 weight tiles; SR backward, RHT-16
    on the wgrad operands only)."""

    _recipe = "nvidia"


def _default_filter(name: str, module: nn.Module) -> bool:
    return not (name.endswith("lm_head") or "embed" in name.split(".")[-1])


def convert_to_quartet2(
    model: nn.Module,
    recipe: str = "quartet2",
    filter_fn: Callable[[str, nn.Module], bool] | None = None,
    config: Quartet2Config | None = None,
) -> list[tuple[str, str]]:
    """Swap every eligible ``nn.Linear`` of ``model`` in place for the ``recipe``'s layer.

    Skipped (and logged): the LM head and embeddings (by name), layers ``filter_fn(name, module)``
    rejects, and layers whose dims are not multiples of 16 or whose ``out`` is not a multiple of
    ``hadamard_dim`` (Quartet II). Parameters are shared, not copied, so an optimizer built before
    or after conversion works. Layer i gets seed ``config.seed + i``. Returns ``(name, status)``
    for every Linear seen: "converted" or the reason it was skipped.

    With ``config.backend`` "te" or "torchao" the layers become that library's NVFP4 module
    (NVIDIA's recipe only); what is missing (library, CUDA, Blackwell GPU) is a UserError raised
    before the model is touched.
    """
    base = config or Quartet2Config(recipe=recipe)
    if base.recipe != recipe:
        base = Quartet2Config(**{**asdict(base), "recipe": recipe})
    if base.backend != "simulate":
        dev = next((p.device for p in model.parameters()), None)
        check_backend(base.backend, recipe, dev if dev is not None and dev.type == "cuda" else None)
    cls = QuartetIILinear if recipe == "quartet2" else NvidiaNVFP4Linear
    keep = filter_fn or _default_filter
    report: list[tuple[str, str]] = []
    targets = [(n, m) for n, m in model.named_modules()
               if isinstance(m, nn.Linear) and not isinstance(m, _QuantLinearBase)]
    i = 0
    for name, mod in targets:
        if not keep(name, mod):
            reason = "skipped: filtered (head / embedding / filter_fn)"
        elif mod.in_features % BLOCK or mod.out_features % BLOCK:
            reason = f"skipped: dims ({mod.in_features}, {mod.out_features}) not multiples of 16"
        elif recipe == "quartet2" and mod.out_features % base.hadamard_dim:
            reason = f"skipped: out_features {mod.out_features} not a multiple of h={base.hadamard_dim}"
        else:
            cfg = Quartet2Config(**{**asdict(base), "seed": base.seed + i})
            i += 1
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            new = (cls.from_linear(mod, cfg, name=name) if base.backend == "simulate"
                   else kernel_linear(mod, base.backend, recipe))
            setattr(parent, child, new)
            reason = "converted"
        if reason != "converted":
            log.info("convert_to_quartet2: %s %s", name, reason)
        report.append((name, reason))
    return report


def nvfp4_weight_error(weight: torch.Tensor) -> float:
    """Relative MSE of the 1x16 RTN NVFP4 weight (for per-layer logging)."""
    w = weight.detach().float()
    return float(((quantize_nvfp4(w).dequantize() - w) ** 2).sum() / (w ** 2).sum().clamp_min(1e-30))
