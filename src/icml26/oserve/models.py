"""Named model configs that ship with icml26 (``oserve/data/<name>.json``, HF ``config.json``
fields only), so ``icml26 oserve plan --model-config llama-2-70b`` needs no download.

``llama-30b`` is LLaMA-1 30B (32.5B parameters, 52 heads, multi-head attention: every head has its
own K/V), the MHA model class the OServe paper uses besides Llama-2-70B (GQA, 8 KV heads).
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path

from icml26.core.errors import UserError
from icml26.sim.cost import ModelSpec

__all__ = ["MODEL_NAMES", "model_config", "model_spec"]

#: packaged configs, by the name ``--model-config`` accepts
MODEL_NAMES = ("llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b", "llama-30b")


def model_config(name_or_path: str | os.PathLike) -> dict:
    """The config dict of a packaged name, or of an HF ``config.json`` (or its folder) at a path."""
    name = str(name_or_path)
    if name.lower() in MODEL_NAMES:
        return json.loads((resources.files("icml26.oserve") / "data" / f"{name.lower()}.json").read_text("utf-8"))
    p = Path(name)
    p = p / "config.json" if p.is_dir() else p
    if not p.is_file():
        raise UserError(f"--model-config {name!r} is neither a packaged model ({', '.join(MODEL_NAMES)}) "
                        f"nor a config.json file")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise UserError(f"{p}: not JSON ({exc.msg} at line {exc.lineno})") from None


def model_spec(name_or_path: str | os.PathLike) -> ModelSpec:
    """A :class:`~icml26.sim.cost.ModelSpec` for a packaged name or a ``config.json`` path."""
    cfg = model_config(name_or_path)
    if not isinstance(cfg, dict):
        raise UserError(f"--model-config {name_or_path}: expected a JSON object")
    try:
        return ModelSpec.from_hf_config(cfg)
    except UserError as exc:
        raise UserError(f"--model-config {name_or_path}: {exc}") from None
