"""Steering specs: the selected features as JSON (and lm-eval ``steered``-style CSV).

``spec.json``: ``{"version": 1, "model": ID, "features": [{"layer", "hook_name", "index",
"coef", "r", "source", "sae_dir"}]}``. Loading re-reads each direction from its SAE folder
(``W_dec[index]``), checks hook and model, and refuses a spec made for another model unless
``force``.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from icml26.core.errors import UserError
from icml26.core.io import atomic_write_json, atomic_write_text
from icml26.corrsteer.sae import hook_name, load_sae
from icml26.corrsteer.steer import Feature

if TYPE_CHECKING:
    import torch

__all__ = ["save_spec", "load_spec", "steering_vector_layers", "to_steering_vector"]


def save_spec(path: str | os.PathLike, features: list[Feature], model_id: str, sae_dirs: dict[int, str]) -> Path:
    """Write ``path`` (JSON) and ``path`` with ``.csv`` (hookpoint, feature_index,
    steering_coefficient, sparse_model columns, one row per feature)."""
    path = Path(path)
    feats = []
    for f in features:
        if f.source != "sae":
            raise UserError(f"only SAE features can be exported; got a {f.source!r} feature")
        feats.append({"layer": f.layer, "hook_name": hook_name(f.layer), "index": f.index, "coef": f.coef,
                      "r": f.r, "source": f.source, "sae_dir": str(Path(sae_dirs[f.layer]).resolve())})
    atomic_write_json(path, {"version": 1, "model": model_id, "features": feats})
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["loader", "action", "sparse_model", "hookpoint", "feature_index", "steering_coefficient",
                "description"])
    for f in feats:
        w.writerow(["sparsify", "add", f["sae_dir"], f["hook_name"], f["index"], f["coef"],
                    f"corrsteer r={f['r']:+.3f}"])
    atomic_write_text(path.with_suffix(".csv"), buf.getvalue())
    return path


def load_spec(path: str | os.PathLike, model_id: str, *, hidden_size: int | None = None,
              force: bool = False) -> list[Feature]:
    path = Path(path)
    try:
        spec = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read steering spec {path}: {exc}") from None
    if spec.get("model") != model_id and not force:
        raise UserError(f"{path} was made for model {spec.get('model')!r}, not {model_id!r}; "
                        "pass --force to apply it anyway")
    out = []
    for k, f in enumerate(spec.get("features", [])):
        try:
            sae = load_sae(f["sae_dir"])
            idx, coef = int(f["index"]), float(f["coef"])
        except KeyError as exc:
            raise UserError(f"{path}: feature {k} lacks field {exc}") from None
        if not 0 <= idx < sae.d_sae:
            raise UserError(f"{path}: feature {k} index {idx} >= d_sae {sae.d_sae}")
        if sae.hook is not None and sae.hook != f.get("hook_name") and not force:
            raise UserError(f"{path}: feature {k} is for {f.get('hook_name')}, its SAE reads {sae.hook}")
        if hidden_size is not None and sae.d_in != hidden_size:
            raise UserError(f"{path}: SAE d_in {sae.d_in} != model hidden size {hidden_size}")
        out.append(Feature(int(f["layer"]), idx, coef, float(f.get("r", 0.0)),
                           sae.W_dec[idx].detach().double(), "sae"))
    if not out:
        raise UserError(f"{path}: the spec has no features")
    return out


def steering_vector_layers(features: list[Feature]) -> dict[int, torch.Tensor]:
    """The features as steering-vectors' ``layer_activations`` (``layer_type="decoder_block"``):
    ``{L - 1: summed vector}`` float32, because that library patches the *output* of decoder block
    ``L - 1`` (= the residual entering block ``L``, where CorrSteer adds). Apply it as CorrSteer does,
    at the last position of every forward call: ``sv.apply(model, token_indices=slice(-1, None))``.
    A feature at block 0 (the embedding output) has no decoder-block form: a ``UserError``."""
    from icml26.corrsteer.steer import steering_deltas

    out = {}
    for L, v in sorted(steering_deltas(features).items()):
        if L == 0:
            raise UserError("a steering vector at block 0's input (the embeddings) has no decoder_block "
                            "form in steering-vectors; steer at layer >= 1")
        out[L - 1] = v.float().clone()
    return out


def to_steering_vector(features: list[Feature]):
    """A ``steering_vectors.SteeringVector`` of the features (needs ``pip install steering-vectors``)."""
    try:
        from steering_vectors import SteeringVector
    except ImportError:
        raise UserError("to_steering_vector needs steering-vectors (pip install steering-vectors); "
                        "steering_vector_layers() gives its layer_activations without it") from None
    return SteeringVector(layer_activations=steering_vector_layers(features), layer_type="decoder_block")
