"""Who gets SSO (or Muon) and who gets AdamW, and spectral init.

- :func:`sso_param_groups` splits a transformer's parameters the paper's way: hidden 2-D weights
  to the matrix optimizer (q/k/v split per head by default — the paper's largest ablation gain),
  embeddings, the LM head and every 1-D parameter to AdamW with weight decay 0.1. Every group
  carries ``algorithm``, so ``SSO([*matrix, *adamw], lr=..., adamw_lr=...)`` is one
  ``torch.optim.Optimizer`` for the whole model (:func:`sso_optimizer` does exactly that).
- :class:`ChainedOptimizer` steps several optimizers as one ``torch.optim.Optimizer`` (for
  pairing the matrix groups with another optimizer, e.g. ``torch.optim.Muon`` + AdamW).
- :func:`spectral_init_` rescales every hidden matrix onto its sphere, ``W ← R·W/‖W‖₂``.
"""

from __future__ import annotations

from collections import ChainMap

import torch
from torch import nn
from torch.optim import Optimizer

from icml26.sso.optim import SSO, atom_view, radius

__all__ = ["sso_param_groups", "sso_optimizer", "ChainedOptimizer", "spectral_init_",
           "QKV_NAMES"]

QKV_NAMES = ("q_proj", "k_proj", "v_proj")


def _head_dim(model: nn.Module) -> int | None:
    cfg = getattr(model, "config", None)
    if cfg is None:
        return None
    hd = getattr(cfg, "head_dim", None)
    if hd:
        return int(hd)
    heads = getattr(cfg, "num_attention_heads", None)
    return int(cfg.hidden_size // heads) if heads else None


def sso_param_groups(
    model: nn.Module,
    *,
    split_qkv_heads: bool = True,
    head_dim: int | None = None,
    qkv_names: tuple[str, ...] = QKV_NAMES,
    adamw_weight_decay: float = 0.1,
    algorithm: str = "sso",
) -> tuple[list[dict], list[dict]]:
    """``(matrix_groups, adamw_groups)`` for a transformer ``model``.

    Matrix groups carry ``algorithm`` (``"sso"`` or ``"muonsphere"``), AdamW groups
    ``algorithm="adamw"``: pass both lists to one :class:`~icml26.sso.optim.SSO`. (Other
    optimizers ignore the key, so the matrix groups also feed ``torch.optim.Muon``.)

    Matrix groups hold the weights of every ``nn.Linear`` except the output embedding (LM head):
    one group with ``split=head_dim`` for modules whose name ends in one of ``qkv_names`` (when
    ``split_qkv_heads``), one with ``split=None`` for the rest. AdamW groups: embeddings and head
    (weight decay ``adamw_weight_decay``), 1-D parameters (same decay, as in the paper), all other
    parameters likewise. Each group carries ``names`` for error messages. Tied weights appear once.
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    head_w = head.weight if head is not None else None
    if algorithm not in ("sso", "muonsphere"):
        raise ValueError(f"algorithm must be 'sso' or 'muonsphere'; got {algorithm!r}")
    hd = head_dim or (_head_dim(model) if split_qkv_heads else None)
    qkv, rest, other = [], [], []
    seen: set[int] = set()
    for mod_name, mod in model.named_modules():
        if isinstance(mod, nn.Linear) and mod.weight is not head_w:
            p = mod.weight
            if id(p) in seen or not p.requires_grad:
                continue
            seen.add(id(p))
            name = f"{mod_name}.weight"
            is_qkv = split_qkv_heads and mod_name.rsplit(".", 1)[-1] in qkv_names
            (qkv if is_qkv else rest).append((name, p))
    for name, p in model.named_parameters():
        if id(p) not in seen and p.requires_grad:
            seen.add(id(p))
            other.append((name, p))
    if qkv and hd is None:  # only a model with q/k/v layers needs the head size
        raise ValueError(f"split_qkv_heads=True needs head_dim for {qkv[0][0]} (the model has no "
                         f"config to read it from): pass head_dim= or split_qkv_heads=False")
    matrix = []
    if qkv:
        matrix.append({"params": [p for _, p in qkv], "names": [n for n, _ in qkv], "split": hd,
                       "algorithm": algorithm})
    if rest:
        matrix.append({"params": [p for _, p in rest], "names": [n for n, _ in rest],
                       "split": None, "algorithm": algorithm})
    adamw = [{"params": [p for _, p in other], "names": [n for n, _ in other],
              "weight_decay": adamw_weight_decay, "algorithm": "adamw"}] if other else []
    return matrix, adamw


def sso_optimizer(model: nn.Module, lr: float = 0.02, *, adamw_lr: float = 3e-3,
                  adamw_betas: tuple[float, float] = (0.9, 0.95), adamw_weight_decay: float = 0.1,
                  split_qkv_heads: bool = True, head_dim: int | None = None,
                  algorithm: str = "sso", spectral_init: bool = True, **sso_kwargs) -> SSO:
    """One :class:`SSO` for a whole transformer: :func:`sso_param_groups`'s matrix groups step
    with SSO (or MuonSphere), the rest with AdamW, and (``spectral_init``) every hidden matrix is
    put on its sphere first. ``sso_kwargs`` go to :class:`SSO` (``momentum``, ``solver``...)."""
    matrix, adamw = sso_param_groups(model, split_qkv_heads=split_qkv_heads, head_dim=head_dim,
                                     adamw_weight_decay=adamw_weight_decay, algorithm=algorithm)
    opt = SSO([*matrix, *adamw], lr=lr, adamw_lr=adamw_lr, adamw_betas=adamw_betas,
              mode=algorithm, **sso_kwargs)
    if spectral_init:
        opt.spectral_init_()
    return opt


class ChainedOptimizer(Optimizer):
    """Several optimizers stepped as one ``torch.optim.Optimizer``: ``step(closure)`` calls the
    closure once, then each member's ``step``.

    For SSO alone prefer one :class:`SSO` with ``algorithm="adamw"`` groups
    (:func:`sso_optimizer`); this is for pairing the matrix groups with another optimizer, as the
    claim does for ``torch.optim.Muon`` + AdamW. ``param_groups`` are the members' own group
    dicts (an LR scheduler's changes reach the members); ``state`` is a read-only view of their
    states; ``state_dict`` is ``{"optimizers": [each member's state_dict]}``. A parameter in two
    members is refused; ``add_param_group`` is refused (add groups to a member).
    """

    def __init__(self, *optimizers: Optimizer):
        if not optimizers:
            raise ValueError("ChainedOptimizer needs at least one optimizer")
        for i, o in enumerate(optimizers):
            if not isinstance(o, Optimizer):
                raise TypeError(f"ChainedOptimizer: member {i} is a {type(o).__name__}, "
                                f"not a torch.optim.Optimizer")
        self._members_ready = False
        owner: dict[int, int] = {}
        for i, o in enumerate(optimizers):
            for g in o.param_groups:
                for p in g["params"]:
                    j = owner.setdefault(id(p), i)
                    if j != i:
                        raise ValueError(f"ChainedOptimizer: a parameter of shape "
                                         f"{tuple(p.shape)} is in two members ({j} and {i})")
        super().__init__([p for o in optimizers for g in o.param_groups for p in g["params"]], {})
        self.optimizers = list(optimizers)
        self.param_groups = [g for o in self.optimizers for g in o.param_groups]
        self.state = ChainMap(*[o.state for o in self.optimizers])
        self._members_ready = True

    def add_param_group(self, param_group: dict) -> None:
        if getattr(self, "_members_ready", False):
            raise TypeError("ChainedOptimizer.add_param_group: add the group to one of "
                            "its member optimizers instead")
        super().add_param_group(param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for o in self.optimizers:
            o.step()
        return loss

    def state_dict(self) -> dict:
        return {"optimizers": [o.state_dict() for o in self.optimizers]}

    def load_state_dict(self, state_dict: dict) -> None:
        saved = state_dict.get("optimizers") if isinstance(state_dict, dict) else None
        if not isinstance(saved, list) or len(saved) != len(self.optimizers):
            got = len(saved) if isinstance(saved, list) else type(saved).__name__
            raise ValueError(f"ChainedOptimizer.load_state_dict: expected {len(self.optimizers)} "
                             f"optimizer states; got {got}")
        for o, s in zip(self.optimizers, saved, strict=True):
            o.load_state_dict(s)


@torch.no_grad()
def spectral_init_(target, *, radius_scaler: float = 1.0, split_qkv_heads: bool = True):
    """Put every hidden matrix on its sphere: ``W ← R·W/‖W‖₂`` per atom (exact σ, float64).

    ``target``: an :class:`SSO` optimizer (its groups, splits and radius), a list of matrix
    groups from :func:`sso_param_groups`, or a model (groups built with ``split_qkv_heads``).
    Returns ``target``.
    """
    if isinstance(target, SSO):
        target.spectral_init_()
        return target
    groups = target
    if isinstance(target, nn.Module):
        groups, _ = sso_param_groups(target, split_qkv_heads=split_qkv_heads)
    for group in groups:
        if group.get("algorithm") == "adamw":
            continue
        for p in group["params"]:
            nb, mm, nn_ = atom_view(p.shape, group.get("split"))
            w = p.detach().reshape(nb, mm, nn_).double()
            sig = torch.linalg.matrix_norm(w, ord=2)
            if bool((sig <= 0).any()):
                raise ValueError(f"cannot spectral-init an all-zero matrix of shape {tuple(p.shape)}")
            r = radius(mm, nn_, group.get("radius_scaler", radius_scaler))
            p.copy_((w * (r / sig).view(-1, 1, 1)).reshape(p.shape).to(p.dtype))
    return target
