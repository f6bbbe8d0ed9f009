"""Shared pieces of the planner adapters: reaction SMILES from AiZynthFinder and syntheseus
objects, and filtering / re-ranking by ChemCensor level.

The adapters themselves live in modules that import their library at the top, so that nothing
imports them unless the library is there:

- :mod:`icml26.chemcensor.aizynth` — ``ChemCensorFilter``, an AiZynthFinder filter-policy
  strategy (subclass of ``FilterStrategy``) that rejects a retro step whose level is below
  ``min_level``; AiZynthFinder loads it by dotted path from its config::

      filter:
        chemcensor:
          type: icml26.chemcensor.aizynth.ChemCensorFilter
          db: precedents.sqlite
          min_level: 1
          mapper: given        # AiZynthFinder's own template maps; or rxnmapper

- :mod:`icml26.chemcensor.synth_model` — ``ChemCensorBackwardModel``, a syntheseus
  ``BackwardReactionModel`` wrapping another one: the inner model's proposals are scored, the
  level goes into each reaction's ``metadata`` (``"chemcensor_level"``, ``"chemcensor_stage"``)
  and the list is filtered (``min_level``) and/or re-ranked (stable: by level, then the inner
  model's order).

Both libraries are optional (``pip install icml26[syntheseus]``; AiZynthFinder 4.4.1 pins
``rdkit<2024`` and ``numpy<2``, so it lives in its own environment with ``icml26`` installed
there ``--no-deps``). A proposal with no product raises :class:`~icml26.core.errors.UserError`
naming the field; an invalid proposal is data (level -1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from icml26.core.errors import UserError

__all__ = ["MODES", "aizynth_reaction_smiles", "syntheseus_reaction_smiles", "rank_by_level"]

MODES = ("filter", "rerank", "both")


def rank_by_level(items: Sequence, levels: Sequence[int], *, min_level: int | None, mode: str):
    """Keep ``items`` whose level is >= ``min_level`` (modes ``filter``/``both``) and/or order
    them by level, highest first, ties in their given order (modes ``rerank``/``both``)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}; got {mode!r}")
    pairs = list(zip(items, levels, strict=True))
    if mode in ("filter", "both") and min_level is not None:
        pairs = [p for p in pairs if p[1] >= min_level]
    if mode in ("rerank", "both"):
        pairs = sorted(pairs, key=lambda p: -p[1])  # sorted() is stable
    return [p[0] for p in pairs]


# --- AiZynthFinder -----------------------------------------------------------------------------


def _smiles_of(mol: Any, what: str) -> str:
    smi = getattr(mol, "smiles", None) if mol is not None else None
    if not isinstance(smi, str) or not smi.strip():
        raise UserError(f"AiZynthFinder reaction: field `{what}` has no SMILES (got {mol!r})")
    return smi


def aizynth_reaction_smiles(reaction: Any, *, mapped: bool = False) -> str:
    """Forward ``reactants>>product`` of an AiZynthFinder ``RetroReaction``.

    The product is ``reaction.mol`` (the molecule the retro step was applied to), the reactants
    ``reaction.reactants[reaction.index]``. ``mapped``: use ``reaction.mapped_reaction_smiles()``
    (written retro, ``product>>reactants``) turned forward, for ChemCensor's ``mapper="given"``.
    """
    product = _smiles_of(getattr(reaction, "mol", None), "mol")
    if mapped:
        retro = reaction.mapped_reaction_smiles()
        prod, _, reac = retro.partition(">>")
        if not prod.strip():
            raise UserError("AiZynthFinder reaction: field `mol` has no mapped SMILES")
        if not reac.strip():
            raise UserError("AiZynthFinder reaction: field `reactants` is empty")
        return f"{reac}>>{prod}"
    try:
        outcome = reaction.reactants[reaction.index]
    except (IndexError, TypeError):
        raise UserError(
            f"AiZynthFinder reaction on {product}: field `reactants` has no outcome "
            f"{getattr(reaction, 'index', None)!r}"
        ) from None
    if not outcome:
        raise UserError(f"AiZynthFinder reaction on {product}: field `reactants` is empty")
    reac = ".".join(_smiles_of(m, "reactants") for m in outcome)
    return f"{reac}>>{product}"


# --- syntheseus --------------------------------------------------------------------------------


def syntheseus_reaction_smiles(rxn: Any) -> str:
    """``reactants>>product`` of a syntheseus ``Reaction`` (its ``reaction_smiles``)."""
    products = getattr(rxn, "products", None)
    if not products or not all(getattr(m, "smiles", "").strip() for m in products):
        raise UserError(f"syntheseus reaction {rxn!r}: field `products` is empty")
    reactants = getattr(rxn, "reactants", None)
    if not reactants:
        raise UserError(f"syntheseus reaction {rxn!r}: field `reactants` is empty")
    return rxn.reaction_smiles
