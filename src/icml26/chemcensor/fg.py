"""The functional-group (FG) library and environment signatures.

ChemCensor's level k (1..4) requires that every FG in the candidate's *environment* (reactant
atoms outside the reaction centre RC_k) was seen in the environment of some precedent with the
same centre. The official code ships hundreds of FG patterns; this library is our own list of
77 SMARTS (free OH/NH/SH, acids and derivatives, boron, aryl halides by ring position, carbonyls,
nitro, nitrile, organometallics, protecting groups, ...). Its hash (:data:`FG_HASH`) is stored in
every database, and a database built with another library is refused.

A signature is a Python ``int`` used as a bit set: bit ``i`` set means pattern ``FG_SMARTS[i]``
has at least one match lying entirely outside the centre atoms.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from rdkit import Chem

__all__ = ["FG_SMARTS", "FG_NAMES", "FG_HASH", "fg_signature", "fg_names_of"]

# (name, SMARTS). Order is part of the hash: append, never reorder.
_LIBRARY: tuple[tuple[str, str], ...] = (
    ("alcohol_primary", "[CX4;H2][OX2;H1]"),
    ("alcohol_secondary", "[CX4;H1]([#6])([#6])[OX2;H1]"),
    ("alcohol_tertiary", "[CX4;H0]([#6])([#6])([#6])[OX2;H1]"),
    ("phenol", "c[OX2;H1]"),
    ("enol", "[CX3]=[CX3][OX2;H1]"),
    ("amine_primary_aliph", "[CX4][NX3;H2;!$(N-[C,S]=[O,S,N])]"),
    ("amine_secondary_aliph", "[CX4][NX3;H1;!$(N-[C,S]=[O,S,N]);!$(N-a)][CX4]"),
    ("amine_tertiary_aliph", "[CX4][NX3;H0;!$(N-[C,S]=[O,S,N]);!$(N-a)]([CX4])[CX4]"),
    ("aniline_primary", "c[NX3;H2]"),
    ("aniline_secondary", "c[NX3;H1;!$(N-[C,S]=[O,S,N])]"),
    ("nh_heteroaromatic", "[nH]"),
    ("thiol", "[#6][SX2;H1]"),
    ("thioether", "[#6][SX2;H0][#6]"),
    ("carboxylic_acid", "[CX3](=O)[OX2;H1]"),
    ("carboxylate", "[CX3](=O)[O-]"),
    ("ester", "[#6][CX3](=O)[OX2;H0][#6]"),
    ("lactone", "[#6;R][CX3;R](=O)[OX2;R][#6;R]"),
    ("amide_primary", "[CX3](=O)[NX3;H2]"),
    ("amide_secondary", "[CX3](=O)[NX3;H1][#6]"),
    ("amide_tertiary", "[CX3](=O)[NX3;H0]([#6])[#6]"),
    ("acyl_chloride", "[CX3](=O)[Cl]"),
    ("acyl_bromide", "[CX3](=O)[Br]"),
    ("anhydride", "[CX3](=O)[OX2][CX3](=O)"),
    ("aldehyde", "[CX3;H1](=O)[#6]"),
    ("formyl", "[CX3;H2]=O"),
    ("ketone", "[#6][CX3](=O)[#6]"),
    ("enone", "[CX3]=[CX3][CX3]=O"),
    ("carbamate", "[NX3][CX3](=O)[OX2][#6]"),
    ("urea", "[NX3][CX3](=O)[NX3]"),
    ("carbonate", "[OX2][CX3](=O)[OX2]"),
    ("isocyanate", "N=C=O"),
    ("isothiocyanate", "N=C=S"),
    ("nitrile", "[CX2]#[NX1]"),
    ("nitro", "[$([NX3](=O)=O),$([NX3+](=O)[O-])]"),
    ("nitroso", "[#6][NX2]=O"),
    ("azide", "[$(N=[N+]=[N-]),$(N=N=N)]"),
    ("diazo_azo", "[#6][NX2]=[NX2][#6]"),
    ("hydrazine", "[NX3][NX3]"),
    ("hydroxylamine", "[NX3][OX2;H1]"),
    ("imine", "[CX3]=[NX2;!$(N~O)]"),
    ("oxime", "[CX3]=[NX2][OX2]"),
    ("sulfonyl_chloride", "[SX4](=O)(=O)[Cl]"),
    ("sulfonamide", "[SX4](=O)(=O)[NX3]"),
    ("sulfonic_acid_ester", "[SX4](=O)(=O)[OX2]"),
    ("sulfoxide", "[#6][SX3](=O)[#6]"),
    ("sulfone", "[#6][SX4](=O)(=O)[#6]"),
    ("boronic_acid", "[BX3]([OX2;H1])[OX2;H1]"),
    ("boronic_ester", "[BX3]([OX2;H0])[OX2;H0]"),
    ("aryl_fluoride", "c[F]"),
    ("aryl_chloride", "c[Cl]"),
    ("aryl_bromide", "c[Br]"),
    ("aryl_iodide", "c[I]"),
    ("aryl_halide_ortho_ewg", "c([F,Cl,Br,I])c[$([N+](=O)[O-]),$(C#N),$(C=O)]"),
    ("heteroaryl_halide_2pos", "[n]c[F,Cl,Br,I]"),
    ("alkyl_chloride", "[CX4][Cl]"),
    ("alkyl_bromide", "[CX4][Br]"),
    ("alkyl_iodide", "[CX4][I]"),
    ("alkyl_fluoride", "[CX4][F]"),
    ("trifluoromethyl", "C(F)(F)F"),
    ("grignard_or_organolithium", "[#6][Mg,Li,Zn]"),
    ("organotin_silane", "[#6][Sn,Si]"),
    ("alkene", "[CX3;!$(C=O)]=[CX3;!$(C=O)]"),
    ("terminal_alkyne", "[CX2;H1]#[CX2]"),
    ("internal_alkyne", "[CX2;H0]([#6])#[CX2;H0][#6]"),
    ("epoxide", "C1OC1"),
    ("aziridine", "C1NC1"),
    ("boc", "[NX3][CX3](=O)O[CX4](C)(C)C"),
    ("cbz", "[NX3][CX3](=O)O[CH2]c1ccccc1"),
    ("fmoc", "[NX3][CX3](=O)OCC1c2ccccc2-c2ccccc21"),
    ("benzyl_ether", "[CX4,c][OX2][CH2]c1ccccc1"),
    ("silyl_ether", "[#6][OX2][Si]"),
    ("acetal", "[CX4]([OX2][#6])[OX2][#6]"),
    ("methoxy_aryl", "c[OX2][CH3]"),
    ("phosphorus", "[P]"),
    ("peroxide", "[OX2][OX2]"),
    ("quaternary_ammonium", "[NX4+]"),
    ("pyridine_like_n", "[nX2]"),
)

FG_NAMES: tuple[str, ...] = tuple(n for n, _ in _LIBRARY)
FG_SMARTS: tuple[str, ...] = tuple(s for _, s in _LIBRARY)
FG_HASH: str = hashlib.sha256("\n".join(f"{n}\t{s}" for n, s in _LIBRARY).encode()).hexdigest()[:16]

_PATTERNS = [Chem.MolFromSmarts(s) for s in FG_SMARTS]
for _name, _pat in zip(FG_NAMES, _PATTERNS, strict=True):
    if _pat is None:  # pragma: no cover - a typo in the library itself
        raise RuntimeError(f"FG library: SMARTS of {_name!r} does not parse")


def fg_signature(
    mol: Chem.Mol, exclude: Iterable[int] = (), include: Iterable[int] | None = None
) -> int:
    """Bit set of the FGs matched in ``mol`` by atoms outside ``exclude``.

    A match counts when none of its atoms is in ``exclude`` and, if ``include`` is given, all of
    them are in ``include``. ``mol`` must be sanitised (SMARTS on aromaticity and H counts).
    """
    excl = set(exclude)
    incl = None if include is None else set(include)
    bits = 0
    for i, pat in enumerate(_PATTERNS):
        for match in mol.GetSubstructMatches(pat, uniquify=True, maxMatches=64):
            if excl.isdisjoint(match) and (incl is None or incl.issuperset(match)):
                bits |= 1 << i
                break
    return bits


def fg_names_of(bits: int) -> list[str]:
    """Names of the FGs whose bits are set in ``bits``."""
    return [name for i, name in enumerate(FG_NAMES) if bits >> i & 1]
