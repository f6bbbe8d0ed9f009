"""Resumable claims: a JSON memo of finished units (a seed, a system, a budget).

A long claim computes many independent units. ``Memo`` stores each finished unit's JSON result
atomically as soon as it is done; a rerun after a crash or Ctrl-C skips them. The memo records a
``config`` dict (scale, sizes, seeds...): when the config differs, the old memo is ignored, so a
changed experiment never reuses stale numbers.

    memo = Memo(ctx.out_dir / "memo.json", config={"scale": ctx.scale, "n": 4000})
    for seed in seeds:
        row = memo.compute(f"fcfs/{seed}", lambda: simulate("fcfs", seed))
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from icml26.core.io import atomic_write_json

__all__ = ["Memo", "source_fingerprint"]


def source_fingerprint(*packages: str) -> str:
    """SHA-256 (16 hex digits) of the ``.py`` files of the named packages/modules.

    Put it in a cache key or a ``Memo`` config so that results computed by older code are not
    reused after the code changed (a git commit would miss uncommitted edits and would also
    invalidate caches on unrelated commits).
    """
    import hashlib
    import importlib.util

    digest = hashlib.sha256()
    for name in sorted(packages):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise ValueError(f"source_fingerprint: no module named {name!r}")
        root = Path(spec.origin)
        files = sorted(root.parent.rglob("*.py")) if root.name == "__init__.py" else [root]
        for f in files:
            digest.update(f.relative_to(root.parent).as_posix().encode())
            digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


class Memo:
    def __init__(self, path: str | os.PathLike, *, config: dict[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.config = json.loads(json.dumps(config or {}, sort_keys=True, default=str))
        self._units: dict[str, Any] = {}
        self.resumed = 0
        try:
            stored = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if isinstance(stored, dict) and stored.get("config") == self.config:
            self._units = dict(stored.get("units") or {})
            self.resumed = len(self._units)

    def __contains__(self, key: str) -> bool:
        return key in self._units

    def __len__(self) -> int:
        return len(self._units)

    def get(self, key: str, default: Any = None) -> Any:
        return self._units.get(key, default)

    def put(self, key: str, value: Any) -> Any:
        """Store ``value`` (JSON-able) under ``key`` and write the memo to disk atomically."""
        self._units[key] = json.loads(json.dumps(value, default=_plain))
        atomic_write_json(self.path, {"config": self.config, "units": self._units})
        return self._units[key]

    def merge_from(self, path: str | os.PathLike) -> int:
        """Copy the units of another memo file that this one lacks (e.g. from worker processes
        that computed parts of the same run); returns how many were added. The other memo must
        have the same config: ``ValueError`` names the differing keys; ``OSError``/``ValueError``
        if it cannot be read."""
        stored = json.loads(Path(path).read_text(encoding="utf-8"))
        other = stored.get("config") if isinstance(stored, dict) else None
        if other != self.config:
            other = other or {}
            diff = sorted(k for k in set(self.config) | set(other)
                          if self.config.get(k) != other.get(k))
            raise ValueError(f"{path} was run with a different configuration ({diff})")
        new = {k: v for k, v in (stored.get("units") or {}).items() if k not in self._units}
        if new:
            self._units.update(new)
            atomic_write_json(self.path, {"config": self.config, "units": self._units})
        return len(new)

    def compute(self, key: str, fn: Callable[[], Any]) -> Any:
        """The stored value of ``key``, or ``fn()`` computed now and stored."""
        if key in self._units:
            return self._units[key]
        return self.put(key, fn())


def _plain(obj: Any) -> Any:
    for attr in ("tolist", "item"):
        if hasattr(obj, attr):
            return getattr(obj, attr)()
    return str(obj)
