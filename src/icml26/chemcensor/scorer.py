"""ChemCensor scoring: an ordinal plausibility level -1..5 for ``reactants>>product``.

Levels (official order): -1 the pipeline failed (stage named); 1 an SIS-only step; 5 an exact
precedent; 1 a pure tautomerisation; otherwise k = the largest of 1..max_center_type such that
for every j <= k the centre RC_j is in the database **and** the candidate's environment FG bits
are a subset of the database's OR-aggregated bits for RC_j (first failure stops); 0 if RC1 fails.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from rdkit import Chem
from rdkit.Chem.MolStandardize import rdMolStandardize

from icml26.chemcensor.centers import Centre, extract_centres
from icml26.chemcensor.db import ReactionDB
from icml26.chemcensor.fg import fg_names_of
from icml26.chemcensor.mapper import MAX_TOKENS, n_tokens, strip_maps
from icml26.chemcensor.reaction import (
    Processed,
    ProcessingError,
    parse_side,
    process_mapped,
    split_reaction,
)
from icml26.core.errors import UserError

__all__ = ["Level", "ChemCensor", "level_from_lookup"]

MAPPERS = ("rxnmapper", "given")


@dataclass(frozen=True)
class Level:
    """``value`` in {-1..5}; ``stage`` that decided it; ``reason`` in words; RXNMapper ``confidence``."""

    value: int
    stage: str
    reason: str = ""
    confidence: float | None = None


def level_from_lookup(centres: Sequence[Centre], db: ReactionDB, max_center_type: int = 4) -> Level:
    """The RC1..RC_k walk (pure function of the centres and the database)."""
    level, stage, reason = 0, "rc1", "RC1 not in the database"
    for c in centres[:max_center_type]:
        bits = db.centre_bits(c.level, c.key)
        if bits is None:
            stage, reason = f"rc{c.level}", f"RC{c.level} not in the database"
            break
        extra = c.env_bits & ~bits
        if extra:
            stage = f"rc{c.level}"
            reason = f"RC{c.level}: functional groups never seen near this centre: {', '.join(fg_names_of(extra))}"
            break
        level, stage, reason = c.level, f"rc{c.level}", f"precedented up to RC{c.level}"
    return Level(level, stage, reason)


_TAUT = None


def is_tautomerisation(rx: Processed) -> bool:
    """One reactant, nothing leaves, and reactant and product share RDKit's canonical tautomer."""
    global _TAUT
    if rx.leaving or len(Chem.GetMolFrags(rx.reactants)) != 1:
        return False
    if rx.reactants.GetNumAtoms() != rx.product.GetNumAtoms():
        return False
    if _TAUT is None:
        _TAUT = rdMolStandardize.TautomerEnumerator()
    a, b = Chem.Mol(rx.reactants), Chem.Mol(rx.product)
    for m in (a, b):
        for at in m.GetAtoms():
            at.SetAtomMapNum(0)
    try:
        return Chem.MolToSmiles(_TAUT.Canonicalize(a)) == Chem.MolToSmiles(_TAUT.Canonicalize(b))
    except Exception:
        return False


class ChemCensor:
    """Score retrosynthesis proposals against a :class:`ReactionDB`.

    Parameters
    ----------
    db : ReactionDB or path of a database file.
    max_center_type : int in [1, 4], the widest centre checked.
    find_exact_match : bool, give 5 to an exact precedent.
    mapper : ``"rxnmapper"`` (map with the RXNMapper worker; input maps are removed first) or
        ``"given"`` (use the atom maps in the input; unmapped input scores -1 at ``mapping``).
    env_radius : None (the whole reactant molecules outside the centre are its environment) or an
        int (only atoms within that many bonds of the centre).
    """

    def __init__(
        self,
        db: ReactionDB | str | Path,
        max_center_type: int = 4,
        find_exact_match: bool = True,
        mapper: str = "rxnmapper",
        env_radius: int | None = None,
        worker=None,
    ):
        if not 1 <= max_center_type <= 4:
            raise ValueError(f"max_center_type must be in [1, 4]; got {max_center_type}")
        if mapper not in MAPPERS:
            raise ValueError(f"mapper must be one of {MAPPERS}; got {mapper!r}")
        self.db = db if isinstance(db, ReactionDB) else ReactionDB.open(db)
        self.max_center_type = max_center_type
        self.find_exact_match = find_exact_match
        self.mapper = mapper
        self.env_radius = self.db.env_radius if env_radius is None else env_radius
        self._worker = worker

    # --- processing ------------------------------------------------------------------------------
    def _validate(self, rxn: str) -> tuple[str, str, str]:
        reac, agents, prod = split_reaction(rxn)
        parse_side(reac, "reactants")
        parse_side(prod, "product")
        return reac, agents, prod

    def _map(self, rxns: list[str]) -> list[tuple[str | None, float | None, str | None]]:
        if self._worker is None:
            from icml26.chemcensor.mapper import RXNMapperWorker

            self._worker = RXNMapperWorker()
        return self._worker.map(rxns)

    def process_many(
        self, rxns: Sequence[str], progress=None, description: str = "processing"
    ) -> Iterator:
        """For each reaction: ``(Processed, centres, confidence)``, or a ``ProcessingError``."""
        prepared: list = []
        for rxn in rxns:
            try:
                prepared.append(self._validate(rxn))
            except ProcessingError as exc:
                prepared.append(exc)
        conf: dict[int, float | None] = {}
        if self.mapper == "rxnmapper":
            todo = []
            for i, p in enumerate(prepared):
                if isinstance(p, ProcessingError):
                    continue
                plain = strip_maps(f"{p[0]}>>{p[2]}")
                if n_tokens(plain) > MAX_TOKENS:
                    prepared[i] = ProcessingError(
                        "mapping", f"over {MAX_TOKENS} SMILES tokens (RXNMapper limit 512)"
                    )
                else:
                    todo.append((i, plain))
            mapped = self._map([t[1] for t in todo]) if todo else []
            for (i, _), (m, c, err) in zip(todo, mapped, strict=True):
                if m is None:
                    prepared[i] = ProcessingError("mapping", f"RXNMapper failed: {err}")
                else:
                    r, _, p = m.split(">")
                    prepared[i] = (r, prepared[i][1], p)
                    conf[i] = c
        it = (
            range(len(prepared))
            if progress is None
            else progress.track(range(len(prepared)), len(prepared), description)
        )
        for i in it:
            p = prepared[i]
            if isinstance(p, ProcessingError):
                yield p
                continue
            try:
                rx = process_mapped(p[0], p[2], p[1])
                rx.confidence = conf.get(i)
                yield rx, extract_centres(rx, self.max_center_type, self.env_radius), conf.get(i)
            except ProcessingError as exc:
                yield exc

    # --- scoring ---------------------------------------------------------------------------------
    def score_processed(self, rx: Processed, centres: Sequence[Centre]) -> Level:
        c = rx.confidence
        if rx.sis_only:
            return Level(1, "sis_only", "only stereo specification changes", c)
        if self.find_exact_match and self.db.has_exact(rx.canonical):
            return Level(5, "exact", "exact precedent in the database", c)
        if is_tautomerisation(rx):
            return Level(1, "tautomer", "pure tautomerisation", c)
        lv = level_from_lookup(centres, self.db, self.max_center_type)
        return Level(lv.value, lv.stage, lv.reason, c)

    def score(self, rxn: str) -> Level:
        """Level of one ``reactants>>product`` (or ``reactants>agents>product``) SMILES."""
        return self.score_many([rxn])[0]

    def score_many(
        self,
        rxns: Sequence[str],
        n_jobs: int = 1,
        checkpoint: str | Path | None = None,
        progress=None,
        chunk: int = 256,
    ) -> list[Level]:
        """Levels of many reactions; ``n_jobs`` processes; resumable through a JSONL ``checkpoint``."""
        rxns = [str(r) for r in rxns]
        done: dict[int, Level] = {}
        ck = None
        if checkpoint is not None:
            ck = Path(checkpoint)
            digest = hashlib.sha256("\n".join(rxns).encode()).hexdigest()[:16]
            if ck.exists() and ck.stat().st_size:
                lines = ck.read_text().splitlines()
                head = json.loads(lines[0])
                if head.get("input_hash") != digest:
                    raise UserError(
                        f"{ck}: checkpoint of another input (hash {head.get('input_hash')}, this input {digest}); delete it or pick another path"
                    )
                for line in lines[1:]:
                    try:
                        d = json.loads(line)
                    except json.JSONDecodeError:
                        break  # a torn last line
                    i = d.pop("i")
                    done[i] = Level(**d)
            else:
                ck.parent.mkdir(parents=True, exist_ok=True)
                ck.write_text(json.dumps({"input_hash": digest, "n": len(rxns)}) + "\n")
        todo = [i for i in range(len(rxns)) if i not in done]
        tick = progress.task("scoring", len(todo)) if progress is not None else (lambda n=1: None)
        for s in range(0, len(todo), chunk):
            idx = todo[s : s + chunk]
            levels = self._score_chunk([rxns[i] for i in idx], n_jobs)
            for i, lv in zip(idx, levels, strict=True):
                done[i] = lv
            if ck is not None:
                with ck.open("a") as fh:
                    fh.writelines(json.dumps({"i": i, **asdict(done[i])}) + "\n" for i in idx)
            tick(len(idx))
        return [done[i] for i in range(len(rxns))]

    def _score_chunk(self, rxns: list[str], n_jobs: int) -> list[Level]:
        if self.mapper == "rxnmapper":  # one mapper worker, batched; processing in this process
            return [self._level_of(x) for x in self.process_many(rxns)]
        if n_jobs <= 1 or len(rxns) < 2 * n_jobs:
            return [self._level_of(x) for x in self.process_many(rxns)]
        global _POOL_CENSOR
        _POOL_CENSOR = self
        ctx = mp.get_context("fork")
        with ctx.Pool(n_jobs) as pool:
            return pool.map(_pool_score, rxns, chunksize=max(1, len(rxns) // (4 * n_jobs)))

    def _level_of(self, item) -> Level:
        if isinstance(item, ProcessingError):
            return Level(-1, item.stage, item.reason)
        rx, centres, _ = item
        return self.score_processed(rx, centres)


_POOL_CENSOR: ChemCensor | None = None


def _pool_score(rxn: str) -> Level:
    assert _POOL_CENSOR is not None
    return _POOL_CENSOR._level_of(next(iter(_POOL_CENSOR.process_many([rxn]))))
