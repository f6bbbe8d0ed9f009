"""The precedent database: exact canonical reactions and reaction centres with FG signatures.

On disk it is one SQLite file (schema below); in memory two dicts, so that a lookup is a hash
probe (microseconds). ``meta`` holds the schema version, the FG-library hash, the largest centre
level and the environment radius; opening a file whose schema or FG hash differs is refused.

    meta(key TEXT PRIMARY KEY, value TEXT)
    reactions(canonical TEXT PRIMARY KEY, count INTEGER)
    centres(level INTEGER, key TEXT, fg_bits TEXT /* hex */, count INTEGER, PRIMARY KEY(level, key))
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from icml26.chemcensor.fg import FG_HASH
from icml26.core.errors import UserError
from icml26.core.io import atomic_path

__all__ = ["ReactionDB", "SCHEMA_VERSION"]

SCHEMA_VERSION = "1"


class ReactionDB:
    """Precedents in memory: ``exact`` (canonical reaction -> count) and ``centres``
    ((level, key) -> OR-aggregated environment FG bits), ``centre_counts`` ((level, key) -> n)."""

    def __init__(self, max_level: int = 4, env_radius: int | None = None):
        if not 1 <= max_level <= 4:
            raise ValueError(f"max_level must be in [1, 4]; got {max_level}")
        self.max_level = max_level
        self.env_radius = env_radius
        self.exact: Counter[str] = Counter()
        self.centres: dict[tuple[int, str], int] = {}
        self.centre_counts: Counter[tuple[int, str]] = Counter()
        self.build_failures: Counter[str] = Counter()

    def __len__(self) -> int:
        return sum(self.exact.values())

    # --- filling -------------------------------------------------------------------------------
    def add(self, canonical: str, centres: Iterable) -> None:
        """Add one processed reaction: its canonical SMILES and its :class:`Centre` list."""
        self.exact[canonical] += 1
        for c in centres:
            if c.level > self.max_level:
                continue
            k = (c.level, c.key)
            self.centres[k] = self.centres.get(k, 0) | c.env_bits
            self.centre_counts[k] += 1

    @classmethod
    def build(
        cls,
        rxns: Iterable[str],
        out: str | Path | None = None,
        *,
        mapper: str = "given",
        max_level: int = 4,
        env_radius: int | None = None,
        progress=None,
    ) -> ReactionDB:
        """Process reactions (atom-mapped when ``mapper="given"``) and collect their precedents.

        Reactions that fail processing are skipped and counted by stage in ``build_failures``.
        With ``out`` the database is written there atomically.
        """
        from icml26.chemcensor.scorer import ChemCensor  # late: scorer imports this module

        db = cls(max_level=max_level, env_radius=env_radius)
        censor = ChemCensor(db, max_center_type=max_level, mapper=mapper, env_radius=env_radius)
        rxns = list(rxns)
        for rx in censor.process_many(rxns, progress=progress, description="building precedent DB"):
            if not isinstance(rx, tuple):  # a ProcessingError
                db.build_failures[rx.stage] += 1
                continue
            db.add(rx[0].canonical, rx[1])
        if not db.exact:
            raise UserError(
                f"no reaction of {len(rxns)} could be processed; failures by stage: {dict(db.build_failures)}"
            )
        if out is not None:
            db.save(out)
        return db

    def merged(self, other: ReactionDB) -> ReactionDB:
        """A new database holding the precedents of both (a superset of each)."""
        db = ReactionDB(max(self.max_level, other.max_level), self.env_radius)
        for src in (self, other):
            db.exact.update(src.exact)
            db.centre_counts.update(src.centre_counts)
            for k, v in src.centres.items():
                db.centres[k] = db.centres.get(k, 0) | v
        return db

    # --- lookup ----------------------------------------------------------------------------------
    def has_exact(self, canonical: str) -> bool:
        return canonical in self.exact

    def centre_bits(self, level: int, key: str) -> int | None:
        """OR-aggregated environment bits of a centre, or None when the centre is unknown."""
        return self.centres.get((level, key))

    # --- disk ------------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the SQLite file atomically (temp file in the same folder, then rename)."""
        path = Path(path)
        with atomic_path(path) as tmp:  # the usual permissions, replaced only on success
            con = sqlite3.connect(tmp)
            with con:
                con.execute("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT)")
                con.execute("CREATE TABLE reactions(canonical TEXT PRIMARY KEY, count INTEGER)")
                con.execute(
                    "CREATE TABLE centres(level INTEGER, key TEXT, fg_bits TEXT, count INTEGER, PRIMARY KEY(level, key))"
                )
                meta = {
                    "schema": SCHEMA_VERSION,
                    "fg_hash": FG_HASH,
                    "max_level": str(self.max_level),
                    "env_radius": "" if self.env_radius is None else str(self.env_radius),
                }
                con.executemany("INSERT INTO meta VALUES (?, ?)", meta.items())
                con.executemany("INSERT INTO reactions VALUES (?, ?)", self.exact.items())
                con.executemany(
                    "INSERT INTO centres VALUES (?, ?, ?, ?)",
                    (
                        (lv, key, format(bits, "x"), self.centre_counts[(lv, key)])
                        for (lv, key), bits in self.centres.items()
                    ),
                )
            con.close()
        return path

    @classmethod
    def open(cls, path: str | Path) -> ReactionDB:
        """Load a database file; UserError on a missing file, another schema/FG library, or no data."""
        path = Path(path)
        if not path.is_file():
            raise UserError(
                f"{path}: no such database file (build one with `icml26 chemcensor build-db`)"
            )
        try:
            con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            meta = dict(con.execute("SELECT key, value FROM meta"))
        except sqlite3.DatabaseError as exc:
            raise UserError(f"{path}: not a ChemCensor database ({exc})") from None
        if meta.get("schema") != SCHEMA_VERSION:
            raise UserError(
                f"{path}: schema {meta.get('schema')!r}, expected {SCHEMA_VERSION!r}; rebuild it"
            )
        if meta.get("fg_hash") != FG_HASH:
            raise UserError(
                f"{path}: built with FG library {meta.get('fg_hash')!r}, this code has {FG_HASH!r}; rebuild it"
            )
        env = meta.get("env_radius") or None
        db = cls(int(meta["max_level"]), None if env is None else int(env))
        db.exact.update(dict(con.execute("SELECT canonical, count FROM reactions")))
        for lv, key, bits, n in con.execute("SELECT level, key, fg_bits, count FROM centres"):
            db.centres[(lv, key)] = int(bits, 16)
            db.centre_counts[(lv, key)] = n
        con.close()
        if not db.exact:
            raise UserError(f"{path}: the database is empty")
        return db
