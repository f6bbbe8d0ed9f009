"""The compiled CPU path of BinaryPC decode: code scores and top-k selection in C++.

``csrc/bpc_cpu.cpp`` is built lazily, at first use, with ``torch.utils.cpp_extension.load`` and
cached under ``$XDG_CACHE_HOME/icml26/torch_extensions/<key>``, the key hashing the source, the
torch version, the compiler flags and the CPU model (``-march=native``). Where no compiler (or
ninja) exists the build fails once, :func:`load` warns in one line and returns None, and the
callers in :mod:`icml26.binarypc.select` keep the tensor path, which computes the same selections.

``ICML26_BPC_KERNEL=torch`` disables the compiled path (``cpp`` makes a failed build an error).
"""

from __future__ import annotations

import hashlib
import os
import platform
import warnings
from pathlib import Path

import torch

__all__ = ["available", "load", "scores", "select"]

SOURCE = Path(__file__).with_name("csrc") / "bpc_cpu.cpp"
FLAGS = ("-O3", "-march=native", "-std=c++17")
_MOD = None
_TRIED = False


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "flags")):
                return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def build_key() -> str:
    """Hex digest naming one build: source, torch version, flags, CPU."""
    h = hashlib.sha256(SOURCE.read_bytes())
    for part in (torch.__version__, " ".join(FLAGS), _cpu(), platform.python_version()):
        h.update(part.encode())
    return h.hexdigest()[:16]


def load():
    """The compiled module (``bpc_scores``, ``bpc_select``), or None where it cannot be built
    (one warning per process) or ``ICML26_BPC_KERNEL=torch``."""
    global _MOD, _TRIED
    mode = os.environ.get("ICML26_BPC_KERNEL", "auto")
    if mode not in ("auto", "cpp", "torch"):
        raise ValueError(f"ICML26_BPC_KERNEL must be auto, cpp or torch; got {mode!r}")
    if mode == "torch":
        return None
    if _MOD is not None or _TRIED:
        if _MOD is None and mode == "cpp":
            raise RuntimeError("the BinaryPC C++ kernel could not be built (ICML26_BPC_KERNEL=cpp)")
        return _MOD
    _TRIED = True
    try:
        from torch.utils import cpp_extension

        from icml26.core.lm import cache_root

        key = build_key()
        build = cache_root() / "torch_extensions" / f"bpc_cpu_{key}"
        build.mkdir(parents=True, exist_ok=True)
        _clear_stale_lock(build / "lock")
        _MOD = cpp_extension.load(
            name=f"icml26_bpc_cpu_{key}",
            sources=[str(SOURCE)],
            extra_cflags=list(FLAGS),
            build_directory=str(build),
            verbose=False,
        )
    except Exception as e:  # no compiler, no ninja, a failed build: keep the tensor path
        if mode == "cpp":
            raise RuntimeError(f"the BinaryPC C++ kernel could not be built: {e}") from e
        msg = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        warnings.warn(
            f"icml26.binarypc: C++ kernel unavailable ({msg}); using the tensor path",
            RuntimeWarning,
            stacklevel=2,
        )
        _MOD = None
    return _MOD


def _clear_stale_lock(lock: Path, max_age_s: float = 600.0) -> None:
    """Remove a build lock left by a killed build (cpp_extension waits on it forever); a build
    takes about a minute, so a lock older than ``max_age_s`` has no live owner."""
    import time

    try:
        if time.time() - lock.stat().st_mtime > max_age_s:
            lock.unlink()
    except OSError:
        pass


def available() -> bool:
    """Whether the compiled path can be used in this process (builds it on first call)."""
    return load() is not None


def scores(pint: torch.Tensor, scale: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """(B, Hkv, P) float32: max over each GQA group of float32(Σ_b pint_b·sign_b) · scale.

    pint (B, Hq, bits) int32 with |pint| ≤ 127; scale (B, Hq) float32; codes (B or 1, Hkv, P)
    int64. Equal, bit for bit, to :func:`icml26.binarypc.select.int_code_scores`."""
    return _need().bpc_scores(pint, scale, codes)


def select(
    scores: torch.Tensor,
    k: int,
    n_total: int,
    forced: torch.Tensor | None = None,
    allowed: torch.Tensor | None = None,
) -> torch.Tensor:
    """(B, Hkv, k) int64, ascending: :func:`icml26.binarypc.select.select_tokens` of float32
    ``scores`` (B, Hkv, P), bit for bit (same tie rule), with a partial selection per row."""
    empty = torch.empty(0, dtype=torch.bool)
    if allowed is not None:
        allowed = allowed.to(torch.bool).expand(scores.shape[0], int(n_total))
    if forced is not None:
        forced = forced.to(torch.bool)
    return _need().bpc_select(
        scores,
        empty if forced is None else forced,
        empty if allowed is None else allowed,
        int(n_total),
        int(k),
    )


def _need():
    mod = load()
    if mod is None:
        raise RuntimeError("the BinaryPC C++ kernel is not available in this process")
    return mod
