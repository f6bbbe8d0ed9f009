"""rdchiral template round trip: a diagnostic column beside the ChemCensor level.

For a processed (atom-mapped, orphan-free) proposal, rdchiral extracts the retro-template of its
reaction centre (``rdchiral.template_extractor.extract_from_reaction``) and applies it to the
map-free product (``rdchiral.main.rdchiralRun``). The proposal *round-trips* when the proposed
reactant set is among the template's outputs. This checks the atom mapping and the centre are
self-consistent (a template that cannot regenerate its own reactants points at a mapping or
stereo problem), not chemical plausibility: a random bond cut round-trips too.

rdchiral 1.1.0 (pure Python over RDKit) expects leaving-group atoms to be *unmapped*: a
reactant atom whose map number is absent from the product makes ``rdchiralRun`` raise
``KeyError``; :func:`roundtrip` clears those maps before extraction.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rdkit import Chem

from icml26.chemcensor.evaluate import canonical_set
from icml26.chemcensor.reaction import Processed, ProcessingError, process_mapped, split_reaction
from icml26.core.errors import UserError

__all__ = ["RoundTrip", "require_rdchiral", "roundtrip", "roundtrip_mapped", "roundtrip_many"]

RDCHIRAL_PIN = "rdchiral==1.1.0"


@dataclass(frozen=True)
class RoundTrip:
    """``ok``: True (the template regenerates the reactants), False (it does not), None (the
    proposal did not pass processing). ``stage``: ``ok``, ``extract``, ``apply``, ``mismatch`` or
    the ChemCensor stage that failed. ``template``: the retro-template SMARTS when extracted."""

    ok: bool | None
    stage: str
    reason: str
    template: str | None = None


def require_rdchiral():
    try:
        from rdchiral.main import rdchiralReactants, rdchiralReaction, rdchiralRun
        from rdchiral.template_extractor import extract_from_reaction
    except ImportError:
        raise UserError(
            f"the rdchiral column needs rdchiral: pip install '{RDCHIRAL_PIN}'"
        ) from None
    return extract_from_reaction, rdchiralReaction, rdchiralReactants, rdchiralRun


def roundtrip(rx: Processed) -> RoundTrip:
    """Extract the rdchiral retro-template of ``rx`` and apply it to its product."""
    extract, Reaction, Reactants, run = require_rdchiral()
    reac = Chem.Mol(rx.reactants)
    pmaps = {a.GetAtomMapNum() for a in rx.product.GetAtoms()}
    for a in reac.GetAtoms():
        if a.GetAtomMapNum() not in pmaps:
            a.SetAtomMapNum(0)
    reac_smi = Chem.MolToSmiles(reac)
    prod_smi = Chem.MolToSmiles(rx.product)
    want = canonical_set(reac_smi)
    plain = Chem.Mol(rx.product)
    for a in plain.GetAtoms():
        a.SetAtomMapNum(0)
    target = Chem.MolToSmiles(plain)
    with contextlib.redirect_stdout(io.StringIO()):  # rdchiral prints its diagnostics
        try:
            t = extract({"reactants": reac_smi, "products": prod_smi, "_id": 0})
        except Exception as exc:  # rdchiral raises bare errors on odd inputs
            return RoundTrip(False, "extract", f"{type(exc).__name__}: {exc}"[:200])
        smarts = (t or {}).get("reaction_smarts")
        if not smarts:
            return RoundTrip(False, "extract", "no template extracted")
        try:
            outs = run(Reaction(smarts), Reactants(target))
        except Exception as exc:
            return RoundTrip(False, "apply", f"{type(exc).__name__}: {exc}"[:200], smarts)
    if not outs:
        return RoundTrip(False, "apply", "the template does not apply to the product", smarts)
    got = {canonical_set(o) for o in outs}
    if want in got:
        return RoundTrip(True, "ok", f"regenerated (1 of {len(got)} outcome(s))", smarts)
    return RoundTrip(False, "mismatch", f"{len(got)} outcome(s), none is the proposal", smarts)


def roundtrip_mapped(rxn: str) -> RoundTrip:
    """:func:`roundtrip` of an atom-mapped reaction SMILES (processed with the given maps)."""
    try:
        reac, agents, prod = split_reaction(rxn)
        rx = process_mapped(reac, prod, agents)
    except ProcessingError as exc:
        return RoundTrip(None, exc.stage, exc.reason)
    return roundtrip(rx)


def roundtrip_many(censor, rxns: Sequence[str], progress=None) -> list[RoundTrip]:
    """Round trips of ``rxns`` processed (and mapped) the way ``censor`` does it."""
    out = []
    items: Iterable = censor.process_many(rxns, progress=progress, description="rdchiral")
    for item in items:
        if isinstance(item, ProcessingError):
            out.append(RoundTrip(None, item.stage, item.reason))
        else:
            out.append(roundtrip(item[0]))
    return out
