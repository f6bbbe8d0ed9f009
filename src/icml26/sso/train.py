"""A small, honest training harness for comparing SSO, MuonSphere, Muon and AdamW.

One function, :func:`train`, trains a from-scratch ``tiny_llama`` on token blocks with one
optimizer arm and returns its curves: validation loss every ``eval_every`` steps, activation RMS
and abs-max of every attention and MLP output on a fixed probe batch, the exact ‖W‖₂/R of every
hidden atomic matrix, and for SSO λ*, the tangency residual and the solver's msign calls.

Every arm sees the same model initialization (``seed``), the same batches in the same order and
the same schedule (linear warmup, cosine to ``min_lr_ratio``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from icml26.sso.groups import ChainedOptimizer, spectral_init_, sso_param_groups
from icml26.sso.optim import SSO, atom_view, radius
from icml26.sso.spectral import power_iteration

__all__ = ["TrainConfig", "ArmSpec", "ARMS", "build_optimizer", "build_model", "train"]

ARMS = ("adamw", "muon", "sso", "muonsphere", "muon_si")


@dataclass(frozen=True)
class TrainConfig:
    """Model and schedule. ``width`` = hidden size; heads = width / head_dim; SwiGLU FFN 8/3·width."""

    width: int = 128
    layers: int = 4
    head_dim: int = 32
    seq_len: int = 128
    batch_size: int = 16
    steps: int = 300
    warmup_frac: float = 0.1
    min_lr_ratio: float = 0.1
    eval_every: int = 25
    seed: int = 0

    def __post_init__(self):
        for name in ("width", "layers", "head_dim", "seq_len", "batch_size", "steps", "eval_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainConfig.{name} must be >= 1; got {getattr(self, name)}")
        if self.width % self.head_dim:
            raise ValueError(f"width must be a multiple of head_dim; got {self.width}, {self.head_dim}")
        if not 0 <= self.warmup_frac < 1 or not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"warmup_frac in [0,1) and min_lr_ratio in [0,1]; got "
                             f"{self.warmup_frac}, {self.min_lr_ratio}")

    def lr_factor(self, step: int) -> float:
        """Schedule multiplier at 0-based ``step``: linear warmup, then cosine to min_lr_ratio."""
        warm = max(1, int(round(self.warmup_frac * self.steps)))
        if step < warm:
            return (step + 1) / warm
        prog = (step - warm) / max(1, self.steps - warm)
        return self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * prog))


@dataclass(frozen=True)
class ArmSpec:
    """One optimizer arm.

    ``kind``: "adamw" (everything), "muon" (``torch.optim.Muon`` on hidden matrices with
    ``adjust_lr_fn="match_rms_adamw"``, momentum 0.95, Nesterov, weight decay 0.1), "sso" or
    "muonsphere" (hidden matrices, per-head q/k/v, spectral init); "muon_si": "muon" from SSO's
    spectral init (every hidden matrix, per-head q/k/v, scaled to its sphere before step 0: the
    init as an arm of its own, issue 36). ``lr`` is the arm's tuned LR;
    ``aux_lr`` the AdamW LR of embeddings, head and 1-D parameters in the matrix arms.
    """

    kind: str
    lr: float
    aux_lr: float = 5e-3
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    radius_scaler: float = 1.0
    solver_tol: float = 2e-4
    solver: str = "bisect"
    solver_seed: str = "secant"

    def __post_init__(self):
        if self.kind not in ARMS:
            raise ValueError(f"ArmSpec.kind must be one of {ARMS}; got {self.kind!r}")
        if not (self.lr > 0 and self.aux_lr > 0):
            raise ValueError(f"ArmSpec lr and aux_lr must be > 0; got {self.lr}, {self.aux_lr}")


def build_model(cfg: TrainConfig, vocab: str = "bytes"):
    """``(model, tokenizer)``: a from-scratch Llama, separate q/k/v, untied head, train mode."""
    from icml26.core.lm import tiny_llama

    model, tok = tiny_llama(hidden=cfg.width, layers=cfg.layers, heads=cfg.width // cfg.head_dim,
                            max_len=cfg.seq_len, vocab=vocab, seed=cfg.seed, tie_embeddings=False)
    return model.train(), tok


def build_optimizer(model, arm: ArmSpec):
    """``(optimizer, matrix_optimizer_or_None)`` for an arm; lr set as ``initial_lr`` per group."""
    if arm.kind == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=arm.lr, betas=arm.betas,
                                weight_decay=arm.weight_decay)
        for g in opt.param_groups:
            g["initial_lr"] = arm.lr
        return opt, None
    split = arm.kind in ("sso", "muonsphere")
    algo = arm.kind if split else "sso"
    matrix, aux = sso_param_groups(model, split_qkv_heads=split, adamw_weight_decay=arm.weight_decay,
                                   algorithm=algo)
    for g in matrix:
        g["initial_lr"] = arm.lr
    for g in aux:
        g["initial_lr"] = arm.aux_lr
    if arm.kind == "muon_si":  # the same init SSO starts from, then plain Muon
        spectral_init_(model, radius_scaler=arm.radius_scaler, split_qkv_heads=True)
    if arm.kind in ("muon", "muon_si"):  # torch's Muon for the matrices, torch's AdamW for the rest
        mat = torch.optim.Muon([p for g in matrix for p in g["params"]], lr=arm.lr,
                               weight_decay=arm.weight_decay, momentum=0.95, nesterov=True,
                               adjust_lr_fn="match_rms_adamw")
        for g in mat.param_groups:
            g["initial_lr"] = arm.lr
        return ChainedOptimizer(mat, torch.optim.AdamW(aux, lr=arm.aux_lr, betas=arm.betas)), mat
    # one SSO for the whole model: matrix groups step with SSO/MuonSphere, the rest with AdamW
    # (torch's adam kernel, the same arithmetic as torch.optim.AdamW on CPU)
    opt = SSO([*matrix, *aux], lr=arm.lr, radius_scaler=arm.radius_scaler,
              solver_tol=arm.solver_tol, mode=arm.kind, solver=arm.solver,
              solver_seed=arm.solver_seed, adamw_lr=arm.aux_lr,
              adamw_betas=arm.betas)
    spectral_init_(opt)
    return opt, opt


@torch.no_grad()
def retraction_ratio(opt: SSO) -> torch.Tensor:
    """Exact ‖W‖₂/R that SSO's next retraction would leave, ``(n_atoms,)``.

    The retraction divides by the warm-started power-iteration estimate σ̂ of ‖W‖₂, so after it
    ‖W‖₂/R = σ/σ̂ (≥ 1; exactly 1 when the power iteration has converged).
    """
    out = []
    for group in opt.param_groups:
        for p in group["params"]:
            st = opt.state.get(p)
            if not st or st.get("v") is None:
                continue
            nb, m, n = atom_view(p.shape, group["split"])
            w = p.detach().reshape(nb, m, n)
            est, _, _ = power_iteration(w, st["v"], steps=group["power_iter_steps"])
            exact = torch.linalg.matrix_norm(w.double(), ord=2)
            out.append(exact / est.double())
    return torch.cat(out) if out else torch.ones(0, dtype=torch.float64)


def _hidden_atoms(model, split_heads: bool):
    groups, _ = sso_param_groups(model, split_qkv_heads=split_heads)
    return [(p, g.get("split")) for g in groups for p in g["params"]]


@torch.no_grad()
def sphere_ratio(atoms, radius_scaler: float = 1.0) -> torch.Tensor:
    """Exact ‖W‖₂/R of every atomic matrix (float64 SVD); ``(n_atoms,)``."""
    out = []
    for p, split in atoms:
        nb, m, n = atom_view(p.shape, split)
        s = torch.linalg.matrix_norm(p.detach().reshape(nb, m, n).double(), ord=2)
        out.append(s / radius(m, n, radius_scaler))
    return torch.cat(out)


@torch.no_grad()
def _evaluate(model, val: torch.Tensor, probe: torch.Tensor, bs: int) -> tuple[float, dict]:
    model.eval()
    total, count = 0.0, 0
    for i in range(0, val.size(0), bs):
        x = val[i : i + bs]
        out = model(input_ids=x, labels=x)
        n = x.numel() - x.size(0)
        total += float(out.loss) * n
        count += n
    acts: dict[str, list[float]] = {"attn_rms": [], "mlp_rms": [], "attn_absmax": [], "mlp_absmax": []}
    hooks = []
    for layer in model.model.layers:
        for key, mod in (("attn", layer.self_attn), ("mlp", layer.mlp)):
            def hook(_m, _i, o, key=key):
                o = o[0] if isinstance(o, tuple) else o
                acts[f"{key}_rms"].append(float(o.float().pow(2).mean().sqrt()))
                acts[f"{key}_absmax"].append(float(o.float().abs().max()))
            hooks.append(mod.register_forward_hook(hook))
    try:
        model(input_ids=probe)
    finally:
        for h in hooks:
            h.remove()
    model.train()
    return total / count, acts


def train(
    cfg: TrainConfig,
    arm: ArmSpec,
    train_blocks: torch.Tensor,
    val_blocks: torch.Tensor,
    *,
    on_step: Callable[[int], None] | None = None,
    vocab: str = "bytes",
    device: str = "cpu",
) -> dict:
    """Train one arm; returns a JSON-able history.

    ``train_blocks (N, seq_len)`` LongTensor, N ≥ steps·batch_size (shuffled with ``cfg.seed``);
    ``val_blocks (V, seq_len)``. Keys: ``eval_steps``, ``val_loss``, ``train_loss`` (per step),
    ``acts`` (per eval: lists per layer), ``sphere_ratio`` (per eval: min, max of ‖W‖₂/R),
    ``lam_abs``, ``tangent_abs``, ``solver_evals`` (per step means for SSO), ``step_time_s``,
    ``retraction_ratio`` (per eval after step 0, SSO only: min, max of ‖W‖₂/R after retraction).
    A non-finite loss stops the run early and is recorded as ``diverged``.
    """
    need = cfg.steps * cfg.batch_size
    if train_blocks.size(0) < need:
        raise ValueError(f"train_blocks has {train_blocks.size(0)} blocks; need {need}")
    model, _ = build_model(cfg, vocab)
    model.to(device)
    val_blocks = val_blocks.to(device)
    opt, mat = build_optimizer(model, arm)
    g = torch.Generator().manual_seed(cfg.seed)
    order = torch.randperm(train_blocks.size(0), generator=g)[:need].view(cfg.steps, cfg.batch_size)
    probe = val_blocks[: min(4, val_blocks.size(0))]
    atoms = _hidden_atoms(model, split_heads=True)
    hist = {"config": asdict(cfg), "arm": asdict(arm), "eval_steps": [], "val_loss": [],
            "train_loss": [], "acts": [], "sphere_ratio": [], "lam_abs": [], "tangent_abs": [],
            "solver_evals": [], "step_time_s": [], "retraction_ratio": [], "diverged": False}

    def do_eval(step):
        loss, acts = _evaluate(model, val_blocks, probe, cfg.batch_size)
        r = sphere_ratio(atoms, arm.radius_scaler)
        hist["eval_steps"].append(step)
        hist["val_loss"].append(loss)
        hist["acts"].append(acts)
        hist["sphere_ratio"].append([float(r.min()), float(r.max())])
        if isinstance(mat, SSO) and step > 0:
            rr = retraction_ratio(mat)
            hist["retraction_ratio"].append([float(rr.min()), float(rr.max())])

    do_eval(0)
    for step in range(cfg.steps):
        f = cfg.lr_factor(step)
        for grp in opt.param_groups:
            grp["lr"] = grp["initial_lr"] * f
        x = train_blocks[order[step]].to(device)
        t0 = time.perf_counter()
        loss = model(input_ids=x, labels=x).loss
        if not torch.isfinite(loss):
            hist["diverged"] = True
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        hist["step_time_s"].append(time.perf_counter() - t0)
        hist["train_loss"].append(float(loss.detach()))
        if isinstance(mat, SSO) and mat.last_stats:
            st = mat.last_stats
            hist["lam_abs"].append(float(st["lam"].abs().mean()))
            hist["tangent_abs"].append(float(st["h"].abs().max()))
            hist["solver_evals"].append(float(st["evals"].float().mean()))
        if (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps:
            do_eval(step + 1)
        if on_step is not None:
            on_step(1)
    if hist["diverged"]:
        hist["val_loss"].append(float("nan"))
        hist["eval_steps"].append(cfg.steps)
    return hist
