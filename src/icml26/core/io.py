"""Atomic file writes: a crash or Ctrl-C leaves either the old file or the new one, never half.

Every result, cache and checkpoint in icml26 goes through these helpers: the data is written to
a temporary file in the same folder, flushed and fsynced, then moved over the target with
``os.replace`` (atomic on POSIX and Windows within one file system).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = [
    "atomic_open",
    "atomic_path",
    "atomic_dir",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_json",
    "check_output_dir",
    "check_output_file",
]


def _first_existing(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _creatable(path: Path, what: str) -> None:
    """``path`` does not exist yet: its nearest existing ancestor must be a writable folder."""
    from icml26.core.errors import UserError

    base = _first_existing(path.parent if str(path.parent) else Path("."))
    if not base.is_dir():
        raise UserError(f"{what} {path}: {base} is a file, not a folder")
    if not os.access(base, os.W_OK | os.X_OK):
        raise UserError(f"{what} {path}: cannot create it, {base} is not writable")


def check_output_dir(path: str | os.PathLike, what: str = "output folder") -> Path:
    """Before any work: ``path`` is a writable folder, or one that can be created. Raises
    :class:`~icml26.core.errors.UserError` naming the path (a file in its place, no permission)."""
    from icml26.core.errors import UserError

    path = Path(path)
    if path.exists():
        if not path.is_dir():
            raise UserError(f"{what} {path} is a file; give a folder")
        if not os.access(path, os.W_OK | os.X_OK):
            raise UserError(f"{what} {path} is not writable")
        return path
    _creatable(path, what)
    return path


def check_output_file(path: str | os.PathLike, what: str = "output file",
                      overwrite: bool = True) -> Path:
    """Before any work: ``path`` can be written as a file (not a folder; its folder exists or can
    be created and is writable; an existing file only when ``overwrite``). Raises
    :class:`~icml26.core.errors.UserError` naming the path."""
    from icml26.core.errors import UserError

    path = Path(path)
    if path.is_dir():
        raise UserError(f"{what} {path} is a folder; give a file name")
    if path.exists():
        if not overwrite:
            raise UserError(f"{what} {path} exists; remove it or give another name")
        if not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK | os.X_OK):
            raise UserError(f"{what} {path} is not writable")
        return path
    _creatable(path, what)
    return path


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs: Any) -> Iterator[IO]:
    """Open a temporary sibling of ``path`` for writing; on success move it over ``path``.

    If the ``with`` body raises (including ``KeyboardInterrupt``), the temporary file is removed
    and ``path`` is left exactly as it was.
    """
    if "r" in mode or "a" in mode or "+" in mode:
        raise ValueError(f"atomic_open writes whole files; mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    fd, tmp = _sibling(path)
    with _publish(tmp, path), os.fdopen(fd, mode, **kwargs) as f:
        yield f
        f.flush()
        os.fsync(f.fileno())


def _sibling(path: Path) -> tuple[int, str]:
    """A new temporary file next to ``path`` (its folder created): ``(fd, name)``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")


@contextlib.contextmanager
def _publish(tmp: str, path: Path) -> Iterator[None]:
    """On a clean exit give ``tmp`` the usual permissions and move it over ``path``; on any
    exception (``KeyboardInterrupt`` included) remove ``tmp`` and leave ``path`` as it was."""
    try:
        yield
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual permissions
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary sibling path of ``path`` for a writer that opens files by name (SQLite, a
    library's ``save``); on success it gets the usual permissions and replaces ``path``.

    If the ``with`` body raises, the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    fd, tmp = _sibling(path)
    os.close(fd)
    with _publish(tmp, path):
        yield Path(tmp)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Build a whole folder in a temporary sibling; on success it replaces ``path``.

    Yields the temporary folder. If the ``with`` body raises, it is removed and ``path`` is left
    as it was. An existing ``path`` is removed just before the final rename (callers that may
    race hold a lock, as ``core.lm`` does for its model cache).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        yield tmp
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    with atomic_open(path, "wb") as f:
        f.write(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    with atomic_open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return Path(path)


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented JSON; NaN and infinities (not JSON) are written as null."""
    text = json.dumps(_finite(obj), indent=2, allow_nan=False, default=_jsonable)
    return atomic_write_text(path, text + "\n")


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _jsonable(obj: Any) -> Any:
    """Fallback for numpy/torch scalars and paths in result records."""
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    for attr in ("item", "tolist"):
        if hasattr(obj, attr):
            return _finite(getattr(obj, attr)())
    raise TypeError(f"cannot write {type(obj).__name__} as JSON: {obj!r}")
