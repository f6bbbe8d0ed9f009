"""Corpus filtering (a CREED-style validated set) and plausibility@K beside exact-match Top-K.

- :func:`build_dataset`: split records into ``folds`` by Murcko scaffold of the product, score
  each fold against a database built from the *other* folds (a record scored against a database
  that holds it would get 5: the self-precedent trap), keep records at ``level >= min_level``.
- :func:`evaluate_topk`: for ranked proposals per target, exact@K (the gold reactant set is among
  the top K) and plausibility@K (some top-K proposal reaches ``min_level``).
- :func:`auroc`: Mann-Whitney AUROC with ties counted one half.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence

import numpy as np
from rdkit import Chem
from rdkit.Chem.Scaffolds import MurckoScaffold

from icml26.chemcensor.db import ReactionDB
from icml26.chemcensor.scorer import ChemCensor

__all__ = ["build_dataset", "evaluate_topk", "auroc", "canonical_set", "scaffold_of"]


def auroc(pos: Sequence[float], neg: Sequence[float]) -> float:
    """P(score of a positive > score of a negative) + 0.5 P(tie); NaN when a side is empty."""
    p, n = np.asarray(pos, dtype=float), np.asarray(neg, dtype=float)
    if not len(p) or not len(n):
        return float("nan")
    gt = (p[:, None] > n[None, :]).sum()
    eq = (p[:, None] == n[None, :]).sum()
    return float((gt + 0.5 * eq) / (len(p) * len(n)))


def canonical_set(smiles: str) -> str | None:
    """Sorted canonical map-free molecules of a dot-joined SMILES (None if one does not parse)."""
    out = []
    for s in str(smiles).split("."):
        m = Chem.MolFromSmiles(s)
        if m is None:
            return None
        for a in m.GetAtoms():
            a.SetAtomMapNum(0)
        out.append(Chem.MolToSmiles(m))
    return ".".join(sorted(out))


def scaffold_of(rxn: str) -> str:
    """Murcko scaffold SMILES of the product of ``rxn`` ('' when acyclic or unparseable)."""
    prod = rxn.split(">")[-1]
    m = Chem.MolFromSmiles(prod)
    if m is None:
        return ""
    for a in m.GetAtoms():
        a.SetAtomMapNum(0)
    return MurckoScaffold.MurckoScaffoldSmiles(mol=m)


def build_dataset(
    records: Sequence[str],
    min_level: int = 1,
    folds: int = 5,
    *,
    mapper: str = "given",
    max_center_type: int = 4,
    progress=None,
) -> list[dict]:
    """Validated records: each scored against a DB of the other scaffold folds.

    Returns dicts ``rxn_smiles, level, stage, reason, fold, scaffold, split`` for the records
    with ``level >= min_level``; ``split`` is ``test`` for fold 0, ``valid`` for fold 1, else
    ``train`` (a scaffold split).
    """
    if folds < 2:
        raise ValueError(
            f"folds must be >= 2 (each fold is scored against the others); got {folds}"
        )
    records = list(records)
    scaffolds = [scaffold_of(r) for r in records]
    fold_of = [zlib.crc32(s.encode()) % folds for s in scaffolds]
    out = []
    for f in range(folds):
        train = [r for r, k in zip(records, fold_of, strict=True) if k != f]
        test = [i for i, k in enumerate(fold_of) if k == f]
        if not test or not train:
            continue
        db = ReactionDB.build(train, mapper=mapper, max_level=max_center_type)
        levels = ChemCensor(db, max_center_type, mapper=mapper).score_many(
            [records[i] for i in test], progress=progress
        )
        for i, lv in zip(test, levels, strict=True):
            if lv.value >= min_level:
                split = "test" if f == 0 else "valid" if f == 1 else "train"
                out.append(
                    {
                        "rxn_smiles": records[i],
                        "level": lv.value,
                        "stage": lv.stage,
                        "reason": lv.reason,
                        "fold": f,
                        "scaffold": scaffolds[i],
                        "split": split,
                    }
                )
    return out


def evaluate_topk(
    preds: Mapping[str, Sequence[str]],
    gold: Mapping[str, str],
    db: ReactionDB | None = None,
    ks: Sequence[int] = (1, 5, 10),
    *,
    censor: ChemCensor | None = None,
    min_level: int = 1,
    levels: Mapping[str, Sequence[int]] | None = None,
) -> dict[str, float]:
    """exact@K and plausibility@K over targets.

    ``preds``: target SMILES -> ranked reactant SMILES (best first). ``gold``: target -> gold
    reactants. Levels come from ``levels`` (target -> level per proposal) or are computed with
    ``censor`` (default: a ChemCensor on ``db`` with RXNMapper, since proposals are unmapped).
    """
    if not preds:
        raise ValueError("preds is empty")
    if levels is None:
        if censor is None:
            if db is None:
                raise ValueError("give `db`, `censor` or precomputed `levels`")
            censor = ChemCensor(db, mapper="rxnmapper")
        flat = [(t, f"{r}>>{t}") for t, rs in preds.items() for r in rs]
        scored = censor.score_many([x[1] for x in flat])
        levels = {}
        for (t, _), lv in zip(flat, scored, strict=True):
            levels.setdefault(t, []).append(lv.value)
    out: dict[str, float] = {}
    for k in ks:
        ex = pl = 0
        for t, rs in preds.items():
            g = canonical_set(gold.get(t, ""))
            ex += any(g is not None and canonical_set(r) == g for r in rs[:k])
            pl += any(v >= min_level for v in list(levels.get(t, []))[:k])
        out[f"exact@{k}"] = ex / len(preds)
        out[f"plausibility@{k}"] = pl / len(preds)
    return out
