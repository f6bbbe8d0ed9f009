"""Sparse autoencoders on residual streams: TopK, ReLU and JumpReLU, SAELens-compatible folders.

An SAE maps a residual vector ``x`` of shape ``(..., d_in)`` to feature activations
``f(x) = act((x - a*b_dec) @ W_enc + b_enc)`` of shape ``(..., d_sae)`` and back with
``decode(f) = f @ W_dec + b_dec``, where ``a`` is ``apply_b_dec_to_input`` (0 or 1) and ``act`` is

- ``topk``: keep the ``k`` largest pre-activations, ReLU them, zero the rest (Gao et al. 2024);
- ``relu``: ReLU (SAELens "standard");
- ``jumprelu``: ``relu(h) * (h > threshold)`` with a per-feature threshold (GemmaScope; the
  ReLU matters only where a threshold is negative, and SAELens v6 applies it).

Folders follow SAELens v6: ``cfg.json`` (``architecture``, ``d_in``, ``d_sae``, ``dtype``,
``apply_b_dec_to_input``, ``normalize_activations``, ``k`` for TopK, ``metadata`` with
``hook_name``, ``hook_layer``, ``model_name``) and ``sae_weights.safetensors`` (``W_enc``
``(d_in, d_sae)``, ``b_enc``, ``W_dec`` ``(d_sae, d_in)``, ``b_dec``, ``threshold`` for JumpReLU).
Older flat configs (``hook_name`` at the top level, ``activation_fn_str`` / ``activation_fn_kwargs``)
load too. A TopK folder with ``rescale_acts_by_decoder_norm: true`` (SAELens scales pre-activations
by the decoder row norms and divides codes by them before decoding) is loaded with those norms
folded in (``W_enc``, ``b_enc`` times the norms, ``W_dec`` rows to unit norm): the same encode and
decode. Checked against folders written by sae-lens 6.54.12 (``tests/corrsteer/fixtures``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import nn

from icml26.core.errors import UserError
from icml26.core.io import atomic_write_bytes, atomic_write_json

__all__ = ["SAE", "ARCHITECTURES", "save_sae", "load_sae", "from_pretrained", "hook_name", "layer_of_hook",
           "SAELENS_CHECKED", "CFG_KEYS"]

ARCHITECTURES = ("topk", "relu", "jumprelu")
CFG_FILE = "cfg.json"
WEIGHTS_FILE = "sae_weights.safetensors"
_ALIASES = {"standard": "relu", "topk": "topk", "jumprelu": "jumprelu", "relu": "relu"}
#: the sae-lens release whose folders ``load_sae`` was checked against (tests/corrsteer/fixtures)
SAELENS_CHECKED = "6.54.12"
#: every cfg.json key (top level, and under ``metadata``) of that release's folders, and what
#: ``load_sae`` does with it: "read", or "ignored" (no effect on encode/decode of a residual SAE)
CFG_KEYS = {
    "architecture": "read", "d_in": "read", "d_sae": "read", "k": "read", "dtype": "ignored",
    "device": "ignored", "apply_b_dec_to_input": "read", "normalize_activations": "read",
    "rescale_acts_by_decoder_norm": "read", "reshape_activations": "read", "metadata": "read",
}
METADATA_KEYS = {
    "hook_name": "read", "model_name": "read", "hook_head_index": "ignored", "prepend_bos": "ignored",
    "sae_lens_version": "ignored", "sae_lens_training_version": "ignored",
}


def hook_name(layer: int) -> str:
    """TransformerLens name of the residual entering block ``layer`` (= HF ``hidden_states[layer]``)."""
    return f"blocks.{layer}.hook_resid_pre"


def layer_of_hook(name: str) -> int:
    """``"blocks.8.hook_resid_pre"`` -> 8; a clear error for any other hook."""
    parts = str(name).split(".")
    if len(parts) == 3 and parts[0] == "blocks" and parts[1].isdigit() and parts[2] == "hook_resid_pre":
        return int(parts[1])
    raise UserError(
        f"hook_name {name!r} is not supported; expected 'blocks.L.hook_resid_pre' (residual "
        "stream entering block L)"
    )


class SAE(nn.Module):
    """A sparse autoencoder.

    Parameters
    ----------
    d_in, d_sae : int
        Residual width and number of latents.
    arch : "topk" | "relu" | "jumprelu"
    k : int
        Active latents per input (TopK only).
    apply_b_dec_to_input : bool
        Subtract ``b_dec`` before encoding (SAELens' default; our trainer uses it).
    hook : str | None
        ``blocks.L.hook_resid_pre`` the SAE reads; ``layer`` is parsed from it.
    model_name : str | None
        Recorded in the folder's metadata; steering specs check it.
    """

    def __init__(
        self,
        d_in: int,
        d_sae: int,
        arch: str = "topk",
        k: int = 32,
        *,
        apply_b_dec_to_input: bool = True,
        hook: str | None = None,
        model_name: str | None = None,
        dtype: torch.dtype = torch.float32,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if arch not in ARCHITECTURES:
            raise UserError(f"unknown SAE architecture {arch!r}; use one of {', '.join(ARCHITECTURES)}")
        if d_in < 1 or d_sae < 1:
            raise ValueError(f"d_in and d_sae must be >= 1; got d_in={d_in}, d_sae={d_sae}")
        if arch == "topk" and not 1 <= k <= d_sae:
            raise ValueError(f"k must be in [1, d_sae={d_sae}]; got {k}")
        if hook is not None:
            layer_of_hook(hook)
        self.d_in, self.d_sae, self.arch, self.k = d_in, d_sae, arch, int(k)
        self.apply_b_dec_to_input = bool(apply_b_dec_to_input)
        self.hook, self.model_name = hook, model_name
        g = torch.Generator().manual_seed(seed)
        # Decoder rows random unit vectors; encoder = decoder transpose (Gao et al. 2024, sec. A.1).
        w_dec = torch.randn(d_sae, d_in, generator=g, dtype=torch.float64)
        w_dec = w_dec / w_dec.norm(dim=1, keepdim=True)
        self.W_dec = nn.Parameter(w_dec.to(dtype))
        self.W_enc = nn.Parameter(w_dec.T.contiguous().to(dtype))
        self.b_enc = nn.Parameter(torch.zeros(d_sae, dtype=dtype))
        self.b_dec = nn.Parameter(torch.zeros(d_in, dtype=dtype))
        if arch == "jumprelu":
            self.threshold = nn.Parameter(torch.zeros(d_sae, dtype=dtype))

    @property
    def layer(self) -> int | None:
        return None if self.hook is None else layer_of_hook(self.hook)

    def pre_acts(self, x: torch.Tensor) -> torch.Tensor:
        """Pre-activations ``(..., d_sae)`` in the SAE's dtype."""
        if x.shape[-1] != self.d_in:
            raise ValueError(f"SAE expects inputs with last dim d_in={self.d_in}; got shape {tuple(x.shape)}")
        x = x.to(self.W_enc.dtype)
        if self.apply_b_dec_to_input:
            x = x - self.b_dec
        return x @ self.W_enc + self.b_enc

    def activate(self, h: torch.Tensor) -> torch.Tensor:
        if self.arch == "relu":
            return torch.relu(h)
        if self.arch == "jumprelu":
            return torch.relu(h) * (h > self.threshold)
        top = torch.topk(h, self.k, dim=-1)
        return torch.zeros_like(h).scatter_(-1, top.indices, torch.relu(top.values))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Feature activations ``(..., d_sae)`` (>= 0) of residuals ``x`` ``(..., d_in)``."""
        return self.activate(self.pre_acts(x))

    def decode(self, f: torch.Tensor) -> torch.Tensor:
        """Reconstruction ``(..., d_in)`` of activations ``f`` ``(..., d_sae)``."""
        return f.to(self.W_dec.dtype) @ self.W_dec + self.b_dec

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(x))

    @torch.no_grad()
    def normalize_decoder_(self) -> None:
        """Scale decoder rows to unit norm in place (encoder untouched: used during training)."""
        self.W_dec.data /= self.W_dec.data.norm(dim=1, keepdim=True).clamp_min(1e-12)

    @torch.no_grad()
    def fold_input_scale_(self, scale: float) -> None:
        """Make an SAE trained on ``scale * x`` act on raw ``x`` with identical feature activations:
        ``W_enc *= scale``, ``W_dec /= scale``, ``b_dec /= scale`` (and thresholds unchanged)."""
        self.W_enc.data *= scale
        self.W_dec.data /= scale
        self.b_dec.data /= scale

    def config(self) -> dict:
        """The SAELens v6 ``cfg.json`` content."""
        cfg = {
            "architecture": {"relu": "standard"}.get(self.arch, self.arch),
            "d_in": self.d_in,
            "d_sae": self.d_sae,
            "dtype": str(self.W_enc.dtype).removeprefix("torch."),
            "device": "cpu",
            "apply_b_dec_to_input": self.apply_b_dec_to_input,
            "normalize_activations": "none",
            "reshape_activations": "none",
            "metadata": {
                "model_name": self.model_name,
                "hook_name": self.hook,
                "hook_layer": self.layer,
                "hook_head_index": None,
                "prepend_bos": True,
                "sae_lens_version": "6.0.0",
                "sae_lens_training_version": "icml26",
            },
        }
        if self.arch == "topk":
            cfg["k"] = self.k
        return cfg


def save_sae(sae: SAE, folder: str | os.PathLike, extra: dict | None = None) -> Path:
    """Write ``cfg.json`` + ``sae_weights.safetensors`` (float32 on disk unless the SAE is
    float64) atomically; ``extra`` (training stats) goes under ``cfg["icml26"]``."""
    from safetensors.torch import save

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in sae.state_dict().items()}
    atomic_write_bytes(folder / WEIGHTS_FILE, save(tensors, metadata={"format": "pt"}))
    cfg = sae.config()
    if extra:
        cfg["icml26"] = extra
    atomic_write_json(folder / CFG_FILE, cfg)
    return folder


def load_sae(folder: str | os.PathLike, *, dtype: torch.dtype | None = None, device="cpu") -> SAE:
    """Load an SAELens-style folder (v6 nested ``metadata`` or older flat configs)."""
    from safetensors.torch import load_file

    folder = Path(folder)
    cfg_path, w_path = folder / CFG_FILE, folder / WEIGHTS_FILE
    for p in (cfg_path, w_path):
        if not p.is_file():
            raise UserError(f"SAE folder {folder}: missing {p.name}")
    try:
        cfg = json.loads(cfg_path.read_text())
    except ValueError as exc:
        raise UserError(f"{cfg_path}: not valid JSON ({exc})") from None
    meta = cfg.get("metadata") or cfg.get("meta") or {}
    arch_raw = cfg.get("architecture") or cfg.get("activation_fn_str") or "standard"
    arch = _ALIASES.get(str(arch_raw))
    if arch is None:
        raise UserError(
            f"{cfg_path}: unknown architecture {arch_raw!r}; supported: standard/relu, topk, jumprelu"
        )
    k = cfg.get("k") or (cfg.get("activation_fn_kwargs") or {}).get("k") or 1
    for key in ("d_in", "d_sae"):
        if not isinstance(cfg.get(key), int):
            raise UserError(f"{cfg_path}: field {key!r} missing or not an integer")
    tensors = load_file(str(w_path))
    need = {"W_enc": (cfg["d_in"], cfg["d_sae"]), "W_dec": (cfg["d_sae"], cfg["d_in"]),
            "b_enc": (cfg["d_sae"],), "b_dec": (cfg["d_in"],)}
    if arch == "jumprelu":
        need["threshold"] = (cfg["d_sae"],)
    for name, shape in need.items():
        if name not in tensors:
            raise UserError(f"{w_path}: tensor {name!r} missing (has {', '.join(sorted(tensors))})")
        if tuple(tensors[name].shape) != shape:
            raise UserError(f"{w_path}: tensor {name!r} has shape {tuple(tensors[name].shape)}; "
                            f"cfg.json (d_in={cfg['d_in']}, d_sae={cfg['d_sae']}) needs {shape}")
    if cfg.get("reshape_activations", "none") not in ("none", None):
        raise UserError(f"{cfg_path}: reshape_activations={cfg['reshape_activations']!r} (an attention-head "
                        "SAE) is not supported; residual-stream SAEs only")
    if cfg.get("normalize_activations", "none") not in ("none", None):
        raise UserError(f"{cfg_path}: normalize_activations={cfg['normalize_activations']!r} is not "
                        "supported; fold the scale into the weights first")
    hook = meta.get("hook_name") or cfg.get("hook_name")
    dt = dtype or tensors["W_enc"].dtype
    sae = SAE(cfg["d_in"], cfg["d_sae"], arch, int(min(k, cfg["d_sae"])),
              apply_b_dec_to_input=bool(cfg.get("apply_b_dec_to_input", True)),
              hook=hook, model_name=meta.get("model_name") or cfg.get("model_name"), dtype=dt)
    if cfg.get("rescale_acts_by_decoder_norm") and arch != "topk":
        raise UserError(f"{cfg_path}: rescale_acts_by_decoder_norm is only supported for topk SAEs")
    state = {n: tensors[n] for n in need}
    if cfg.get("rescale_acts_by_decoder_norm"):
        # encode: topk(h * |W_dec[i]|); decode: (f / |W_dec[i]|) @ W_dec -> fold the norms in.
        norms = state["W_dec"].double().norm(dim=1).clamp_min(1e-8)
        state["W_enc"] = (state["W_enc"].double() * norms).to(state["W_enc"].dtype)
        state["b_enc"] = (state["b_enc"].double() * norms).to(state["b_enc"].dtype)
        state["W_dec"] = (state["W_dec"].double() / norms[:, None]).to(state["W_dec"].dtype)
    sae.load_state_dict({n: t.to(dt) for n, t in state.items()})
    return sae.to(device)


def from_pretrained(release: str, sae_id: str, *, device="cpu", dtype: torch.dtype | None = None) -> SAE:
    """A released SAE through SAELens's registry (``SAE.from_pretrained(release, sae_id)``, e.g.
    ``("gemma-scope-2b-pt-res-canonical", "layer_12/width_16k/canonical")``), as our :class:`SAE`.

    Needs ``sae-lens`` (not an icml26 dependency: ``pip install sae-lens``) and its hub access;
    the SAE is saved by SAELens into a temporary folder and read back with :func:`load_sae`, so
    the two agree by construction of the folder format checked in tests/corrsteer/fixtures.
    """
    import tempfile

    try:
        from sae_lens import SAE as LensSAE
    except ImportError:
        raise UserError("SAE.from_pretrained needs sae-lens (pip install sae-lens); or download the "
                        "SAE folder yourself and use load_sae(folder)") from None
    got = LensSAE.from_pretrained(release, sae_id, device="cpu")
    lens = got[0] if isinstance(got, tuple) else got  # sae-lens < 6 returned (sae, cfg, sparsity)
    with tempfile.TemporaryDirectory(prefix="icml26-sae-") as tmp:
        lens.save_model(tmp)
        return load_sae(tmp, dtype=dtype, device=device)
