"""Append-only JSONL run log: one flushed row per generation, resumable.

Line 1 is a header ``{"kind": "header", "config_hash": ..., "config": {...}}``; every other line
is a row with ``"key"`` (``task/cue/sample``). Opening an existing log:

- a torn last line (no newline, or not JSON: the process died mid-write) is cut off;
- a log written under another configuration is refused (``force=True`` starts it afresh);
- ``done`` holds the keys already written, so a resumed run skips them.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from icml26.core.errors import UserError

__all__ = ["RunLog", "config_hash", "read_rows"]


def config_hash(config: dict) -> str:
    """SHA-256 (16 hex) of the canonical JSON of ``config``."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


class RunLog:
    def __init__(self, path: str | os.PathLike, config: dict, force: bool = False) -> None:
        self.path = Path(path)
        self.config = config
        self.hash = config_hash(config)
        self.done: set[str] = set()
        self.rows: list[dict] = []
        if self.path.exists() and self.path.stat().st_size > 0 and not force:
            self._load()
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "w", encoding="utf-8") as f:
                f.write(
                    json.dumps(
                        {"kind": "header", "config_hash": self.hash, "config": config},
                        sort_keys=True,
                    )
                    + "\n"
                )
                f.flush()
                os.fsync(f.fileno())
        self._f = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def _load(self) -> None:
        data = self.path.read_bytes()
        good = 0  # byte offset after the last complete, valid line
        lines = []
        pos = 0
        while pos < len(data):
            nl = data.find(b"\n", pos)
            if nl < 0:
                break  # torn: no newline
            try:
                lines.append(json.loads(data[pos:nl]))
            except json.JSONDecodeError:
                break  # torn or garbage: everything from here is dropped
            pos = good = nl + 1
        if good < len(data):
            with open(self.path, "r+b") as f:
                f.truncate(good)
        if not lines or lines[0].get("kind") != "header":
            raise UserError(f"{self.path}: not an algosteer run log (no header line)")
        if lines[0].get("config_hash") != self.hash:
            raise UserError(
                f"{self.path} was written by another configuration (hash "
                f"{lines[0].get('config_hash')}, this run {self.hash}); use another output file "
                "or --force to start it afresh"
            )
        for row in lines[1:]:
            if row["key"] not in self.done:
                self.done.add(row["key"])
                self.rows.append(row)

    def append(self, row: dict) -> None:
        """Write one row (must carry ``key``) and flush it to disk."""
        if row["key"] in self.done:
            raise ValueError(f"row {row['key']!r} is already in {self.path}")
        self._f.write(json.dumps(row, sort_keys=True, default=str) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())
        self.done.add(row["key"])
        self.rows.append(row)

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_rows(path: str | os.PathLike) -> tuple[dict, list[dict]]:
    """``(header, rows)`` of a log (a torn last line is skipped, not repaired)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"run log {path} does not exist")
    header, rows = None, []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if i == 0:
            header = obj
        else:
            rows.append(obj)
    if not header or header.get("kind") != "header":
        raise UserError(f"{path}: not an algosteer run log (no header line)")
    return header, rows
