"""Reaction centres RC1..RC4 and their environment FG signatures.

RC1 is the reacting atoms plus one neighbour shell (on the reactant side the seeds also include
leaving atoms bonded to a reacting atom). Wider centres depend on the context:

- *ring* context (some RC1 atom, on either side, is in a ring): RC2 adds every ring that shares
  an atom with RC1 (and the CIP labels of centre atoms join the key), RC3 adds the fused ring
  systems of those rings, RC4 adds the atoms directly attached to those rings (aryl substituents);
- *linear* context: RC_k is the neighbourhood of depth k of the seeds, k = 2, 3, 4.

The key of RC_k is the canonical fragment SMILES ``reactant fragments>>product fragment`` of the
centre atoms (reacting atoms marked ``:1`` and carrying their H count), plus the SEAr signature
when there is one. The environment signature of RC_k is the OR of :func:`fg_signature` over the
reactants and the product, counting FG matches that do not touch the centre atoms (as the official
FG finder does; optionally only within ``env_radius`` bonds of the centre).
"""

from __future__ import annotations

from dataclasses import dataclass

from rdkit import Chem

from icml26.chemcensor.fg import fg_signature
from icml26.chemcensor.reaction import Processed

__all__ = ["Centre", "shell", "expand", "fragment_key", "extract_centres"]


@dataclass(frozen=True)
class Centre:
    """RC_k of one reaction: ``level`` k, ``key`` (canonical string), ``env_bits`` (FG bit set),
    the atom index sets on each side and whether the ring rules applied."""

    level: int
    key: str
    env_bits: int
    reactant_atoms: frozenset[int]
    product_atoms: frozenset[int]
    ring_context: bool


def shell(mol: Chem.Mol, seeds: set[int], depth: int) -> set[int]:
    """Atoms within ``depth`` bonds of ``seeds`` (breadth-first)."""
    seen, frontier = set(seeds), set(seeds)
    for _ in range(depth):
        nxt = {n.GetIdx() for i in frontier for n in mol.GetAtomWithIdx(i).GetNeighbors()} - seen
        seen |= nxt
        frontier = nxt
    return seen


def _fused_closure(rings: list[set[int]], chosen: list[int]) -> set[int]:
    chosen_set, changed = set(chosen), True
    while changed:
        changed = False
        for j, rj in enumerate(rings):
            if j not in chosen_set and any(len(rj & rings[i]) >= 2 for i in chosen_set):
                chosen_set.add(j)
                changed = True
    return set().union(*(rings[i] for i in chosen_set)) if chosen_set else set()


def expand(mol: Chem.Mol, seeds: set[int], level: int, ring_context: bool) -> set[int]:
    """The atom set of RC_level grown from ``seeds`` (see the module docstring)."""
    rc1 = shell(mol, seeds, 1)
    if level == 1:
        return rc1
    if not ring_context:
        return shell(mol, seeds, level)
    rings = [set(r) for r in mol.GetRingInfo().AtomRings()]
    touching = [i for i, r in enumerate(rings) if r & rc1]
    rc2 = rc1.union(*(rings[i] for i in touching)) if touching else set(rc1)
    if level == 2:
        return rc2
    ring_atoms = _fused_closure(rings, touching)
    rc3 = rc2 | ring_atoms
    if level == 3:
        return rc3
    return rc3 | {n.GetIdx() for i in ring_atoms for n in mol.GetAtomWithIdx(i).GetNeighbors()}


def fragment_key(mol: Chem.Mol, atoms: set[int], marked: set[int], *, stereo: bool = False) -> str:
    """Canonical SMILES of the sub-graph on ``atoms``; ``marked`` atoms carry ``:1`` and H counts.

    Element, charge and aromaticity are kept for all atoms; the result is independent of atom
    order. With ``stereo`` the CIP labels of the fragment's atoms are appended (sorted).
    """
    if not atoms:
        return ""
    frag = Chem.RWMol()
    index = {}
    for i in sorted(atoms):
        a = mol.GetAtomWithIdx(i)
        na = Chem.Atom(a.GetAtomicNum())
        na.SetFormalCharge(a.GetFormalCharge())
        na.SetIsAromatic(a.GetIsAromatic())
        # RDKit's canonical ranking ignores the aromatic flag (c and C tie); the isotope does not
        na.SetIsotope(a.GetIsotope() * 10 + int(a.GetIsAromatic()))
        na.SetNoImplicit(True)
        if i in marked:
            na.SetNumExplicitHs(a.GetTotalNumHs())
            na.SetAtomMapNum(1)
        index[i] = frag.AddAtom(na)
    for b in mol.GetBonds():
        i, j = b.GetBeginAtomIdx(), b.GetEndAtomIdx()
        if i in index and j in index:
            frag.AddBond(index[i], index[j], b.GetBondType())
            nb = frag.GetBondBetweenAtoms(index[i], index[j])
            nb.SetIsAromatic(b.GetIsAromatic())
    frag.UpdatePropertyCache(strict=False)
    Chem.FastFindRings(frag)
    smi = ".".join(sorted(Chem.MolToSmiles(frag, canonical=True).split(".")))
    if stereo:
        labels = sorted(
            mol.GetAtomWithIdx(i).GetProp("_CIPCode")
            for i in atoms
            if mol.GetAtomWithIdx(i).HasProp("_CIPCode")
        )
        if labels:
            smi += "{" + "".join(labels) + "}"
    return smi


def _seeds(rx: Processed) -> tuple[set[int], set[int]]:
    r_seeds = {
        a.GetIdx()
        for a in rx.reactants.GetAtoms()
        if a.GetAtomMapNum() in rx.reacting and a.GetIdx() not in rx.leaving
    }
    r_seeds |= {
        n.GetIdx()
        for i in list(r_seeds)
        for n in rx.reactants.GetAtomWithIdx(i).GetNeighbors()
        if n.GetIdx() in rx.leaving
    }
    p_seeds = {a.GetIdx() for a in rx.product.GetAtoms() if a.GetAtomMapNum() in rx.reacting}
    return r_seeds, p_seeds


def extract_centres(
    rx: Processed, max_level: int = 4, env_radius: int | None = None
) -> list[Centre]:
    """RC1..RC_max_level of a processed reaction (empty list when nothing reacts, e.g. SIS-only)."""
    if not rx.reacting:
        return []
    r_seeds, p_seeds = _seeds(rx)
    Chem.AssignStereochemistry(rx.reactants, cleanIt=True, force=True)
    Chem.AssignStereochemistry(rx.product, cleanIt=True, force=True)
    ring_context = any(
        rx.reactants.GetAtomWithIdx(i).IsInRing() for i in shell(rx.reactants, r_seeds, 1)
    ) or any(rx.product.GetAtomWithIdx(i).IsInRing() for i in shell(rx.product, p_seeds, 1))
    out = []
    for k in range(1, max_level + 1):
        ra = expand(rx.reactants, r_seeds, k, ring_context)
        pa = expand(rx.product, p_seeds, k, ring_context)
        stereo = ring_context and k >= 2
        key = (
            fragment_key(rx.reactants, ra, r_seeds, stereo=stereo)
            + ">>"
            + fragment_key(rx.product, pa, p_seeds, stereo=stereo)
        )
        if rx.sear_signature:
            key += "|" + rx.sear_signature
        r_inc = None if env_radius is None else shell(rx.reactants, ra, env_radius)
        p_inc = None if env_radius is None else shell(rx.product, pa, env_radius)
        bits = fg_signature(rx.reactants, exclude=ra, include=r_inc) | fg_signature(
            rx.product, exclude=pa, include=p_inc
        )
        out.append(Centre(k, key, bits, frozenset(ra), frozenset(pa), ring_context))
    return out
