"""Low-rank models as ordinary HF folders, loadable without icml26.

:func:`apply_ranks_` replaces each chosen layer by ``Sequential(Linear(in, r, bias=False),
Linear(r, out, bias))`` in place. :func:`save_compressed` writes the model's own config plus
``rank_dict`` and an ``auto_map`` entry pointing to a generated, self-contained
``modeling_lowrank.py`` that subclasses the base architecture's ``*ForCausalLM`` class and rebuilds
the same structure before the weights load, so ``AutoModelForCausalLM.from_pretrained(out,
trust_remote_code=True)`` works in a fresh process. Tied embeddings stay tied (the base class
ties them). The folder is written to a temporary sibling and renamed into place.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import nn

from icml26.core.errors import UserError
from icml26.core.io import atomic_dir
from icml26.lems.factorize import LayerFactors
from icml26.lems.layers import low_rank_module, replace_module

__all__ = ["apply_ranks_", "save_compressed", "load_compressed", "count_linear_params"]

MODELING_FILE = "modeling_lowrank.py"
_TEMPLATE = '''"""Low-rank {base} written by icml26.lems: listed linears are Linear(in, r) -> Linear(r, out).

Self-contained: needs only torch and transformers. Loaded through config.json's auto_map with
AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).
"""

from torch import nn
from transformers import {base} as _Base


def _shape(module):
    if type(module).__name__ == "Conv1D":
        return module.weight.shape[0], module.weight.shape[1], module.bias is not None
    return module.in_features, module.out_features, module.bias is not None


def apply_rank_dict(model, rank_dict):
    """Replace each named linear by a (n_in -> r, r -> n_out) pair, bias on the second."""
    for name, rank in rank_dict.items():
        if rank is None:
            continue
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        old = getattr(parent, child)
        n_in, n_out, bias = _shape(old)
        w = old.weight
        setattr(parent, child, nn.Sequential(
            nn.Linear(n_in, rank, bias=False, device=w.device, dtype=w.dtype),
            nn.Linear(rank, n_out, bias=bias, device=w.device, dtype=w.dtype)))
    return model


class LowRank{base}(_Base):
    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        apply_rank_dict(self, getattr(config, "rank_dict", None) or {{}})
'''


def apply_ranks_(model: nn.Module, factors: dict[str, LayerFactors],
                 ranks: dict[str, int | None]) -> dict[str, int]:
    """Replace every layer with a rank in ``ranks`` (None = keep dense) in place.

    Returns the applied ``{name: rank}``. A rank >= the dense break-even is still applied (the
    caller decides); the new modules take the old weight's dtype and device.
    """
    applied: dict[str, int] = {}
    for name, r in ranks.items():
        if r is None:
            continue
        old = model.get_submodule(name)
        left, right = factors[name].truncate(int(r))
        bias = getattr(old, "bias", None)
        new = low_rank_module(left.to(old.weight.device), right.to(old.weight.device),
                              None if bias is None else bias.detach(), old.weight.dtype)
        replace_module(model, name, new)
        applied[name] = int(r)
    return applied


def count_linear_params(model: nn.Module, names: list[str]) -> int:
    """Weight parameters of the named (possibly replaced) layers, biases excluded."""
    total = 0
    for name in names:
        mod = model.get_submodule(name)
        mods = list(mod) if isinstance(mod, nn.Sequential) else [mod]
        total += sum(m.weight.numel() for m in mods)
    return total


def save_compressed(model, tokenizer, out: str | os.PathLike, *, overwrite: bool = False,
                    rank_dict: dict[str, int] | None = None, extra: dict | None = None) -> Path:
    """Write ``model`` (after :func:`apply_ranks_`) as an HF folder at ``out``; returns the path.

    Refuses a non-empty ``out`` unless ``overwrite``. ``rank_dict`` defaults to the one stored by
    :func:`~icml26.lems.compress.compress` on ``model.config``.
    """
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise UserError(f"output folder {out} is not empty; pass overwrite=True (--overwrite)")
    rank_dict = rank_dict if rank_dict is not None else getattr(model.config, "rank_dict", None)
    if not rank_dict:
        raise UserError("save_compressed: the model has no rank_dict (was it compressed?)")
    base = type(model).__name__
    import transformers

    if not hasattr(transformers, base):
        raise UserError(f"{base} is not a transformers class; cannot write a portable folder")
    with atomic_dir(out) as tmp:
        model.config.rank_dict = dict(rank_dict)
        model.config.auto_map = {"AutoModelForCausalLM": f"modeling_lowrank.LowRank{base}"}
        if extra:
            model.config.icml26_lems = extra
        model.save_pretrained(tmp)
        (tmp / MODELING_FILE).write_text(_TEMPLATE.format(base=base), encoding="utf-8")
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
    return out


def load_compressed(path: str | os.PathLike, *, dtype: torch.dtype | None = None,
                    device: str = "cpu"):
    """``(model, tokenizer)`` from a folder written by :func:`save_compressed` (eval mode)."""
    path = Path(path)
    cfg = path / "config.json"
    if not cfg.is_file():
        raise UserError(f"{path} has no config.json: not a compressed model folder")
    if "rank_dict" not in json.loads(cfg.read_text()):
        raise UserError(f"{cfg} has no rank_dict: not written by icml26 lems")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kw = {"dtype": dtype} if dtype is not None else {}
    model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True,
                                                 local_files_only=True, **kw)
    tok = None
    if (path / "tokenizer_config.json").is_file():
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return model.to(device).eval(), tok
