"""The processing pipeline: from a mapped ``reactants>>product`` SMILES to a checked reaction.

Stages (official order; the balance check is ours), each failing with :class:`ProcessingError`
(stage, reason), which the scorer turns into level -1. Each stage after ``split_reaction`` is a
function (:func:`validate_molecules`, :func:`check_product_maps`, :func:`remove_orphans`,
:func:`check_balance`, :func:`reacting_atoms`, :func:`check_skeleton`,
:func:`canonical_reaction`, :func:`count_sis`, :func:`check_static_stereo`,
:func:`sear_signature`); :func:`process_mapped` composes them:

``validator``      length, ``>`` syntax, no dative/coordinate bonds, >= 1 carbon in the product,
                   exactly one product molecule, RDKit sanitisation of every molecule;
``mapping``        atom maps present (``mapper="given"``) or produced by RXNMapper;
``orphan``         reactant molecules with no atom in the product become agents;
``balance``        every product heavy atom maps to a reactant atom of the same element;
``transform``      the reacting atoms (bonds, bond orders, charge, H count or aromaticity change);
``skeleton``       no pure-carbon fragment may be lost across a broken C-C bond (a single =CH2
                   is exempt): "ethyl ether -> methyl ether" is not a reaction;
``canonical``      the map-free canonical reaction used for exact-precedent lookup;
``sis``            at most 2 tetrahedral and 1 E/Z "unspecified -> specified" resolutions;
``static_stereo``  a specified stereocentre that does not react must keep its configuration;
``sear``           electrophilic aromatic substitution gets a regiochemistry signature.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rdkit import Chem, RDLogger

RDLogger.DisableLog("rdApp.*")

__all__ = [
    "ProcessingError",
    "Processed",
    "split_reaction",
    "parse_side",
    "validate_molecules",
    "check_product_maps",
    "remove_orphans",
    "check_balance",
    "leaving_atoms",
    "reacting_atoms",
    "check_skeleton",
    "canonical_reaction",
    "count_sis",
    "check_static_stereo",
    "sear_signature",
    "process_mapped",
]

MAX_SMILES_LEN = 1000  # characters; RXNMapper itself refuses > 512 tokens


class ProcessingError(Exception):
    """A proposal that cannot be processed; the scorer reports level -1 with ``stage``."""

    def __init__(self, stage: str, reason: str):
        super().__init__(f"{stage}: {reason}")
        self.stage = stage
        self.reason = reason


@dataclass
class Processed:
    """A reaction that passed the pipeline.

    ``reactants``/``product``: sanitised RDKit mols with atom-map numbers (``GetAtomMapNum``);
    ``reactants`` holds every non-agent reactant molecule as one (disconnected) mol.
    ``reacting``: map numbers of the atoms that change; ``leaving``: reactant atom indices that
    do not reach the product. ``canonical``: map-free canonical ``reactants>>product``.
    """

    reactants: Chem.Mol
    product: Chem.Mol
    agents: list[str]
    reacting: frozenset[int]
    leaving: frozenset[int]
    canonical: str
    n_tetra_resolved: int = 0
    n_ez_resolved: int = 0
    sear_signature: str = ""
    confidence: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def sis_only(self) -> bool:
        return not self.reacting and (self.n_tetra_resolved + self.n_ez_resolved) > 0


def split_reaction(rxn: str, max_len: int = MAX_SMILES_LEN) -> tuple[str, str, str]:
    """``(reactants, agents, product)`` SMILES strings of ``a>>c`` or ``a>b>c`` (validator stage)."""
    if not isinstance(rxn, str) or not rxn.strip():
        raise ProcessingError("validator", "empty reaction")
    rxn = rxn.strip().split()[0]  # drop a trailing "|...|" extension or comment
    if len(rxn) > max_len:
        raise ProcessingError("validator", f"reaction SMILES longer than {max_len} characters")
    parts = rxn.split(">")
    if len(parts) != 3:
        raise ProcessingError(
            "validator", "expected 'reactants>>product' or 'reactants>agents>product'"
        )
    reac, agents, prod = parts
    if not reac or not prod:
        raise ProcessingError("validator", "empty reactant or product side")
    if "->" in rxn or "<-" in rxn:
        raise ProcessingError("validator", "coordinate (dative) bond")
    return reac, agents, prod


def parse_side(smiles: str, what: str) -> Chem.Mol:
    """Parse and sanitise one side; :class:`ProcessingError` (validator) on any failure."""
    mol = Chem.MolFromSmiles(smiles, sanitize=False)
    if mol is None:
        raise ProcessingError("validator", f"{what}: invalid SMILES {smiles!r}")
    for bond in mol.GetBonds():
        if bond.GetBondType() in (Chem.BondType.DATIVE, Chem.BondType.DATIVEONE):
            raise ProcessingError("validator", f"{what}: coordinate bond")
    try:
        Chem.SanitizeMol(mol)
    except Exception as exc:  # RDKit raises several types (valence, kekulisation)
        raise ProcessingError("validator", f"{what}: sanitisation failed ({exc})") from None
    return mol


def _strip(mol: Chem.Mol) -> str:
    m = Chem.Mol(mol)
    for a in m.GetAtoms():
        a.SetAtomMapNum(0)
    return Chem.MolToSmiles(m)


def canonical_reaction(reactants: Chem.Mol, product: Chem.Mol) -> str:
    """Map-free canonical ``r1.r2>>p`` with reactant molecules sorted (order-invariant)."""
    frags = sorted(_strip(f) for f in Chem.GetMolFrags(reactants, asMols=True, sanitizeFrags=False))
    return ".".join(frags) + ">>" + _strip(product)


def _neighbour_table(mol: Chem.Mol, idx: int, leaving_tag: dict[int, str]) -> tuple:
    a = mol.GetAtomWithIdx(idx)
    out = []
    for b in a.GetBonds():
        n = b.GetOtherAtom(a)
        key = n.GetAtomMapNum() if n.GetIdx() not in leaving_tag else f"x{n.GetSymbol()}"
        out.append((str(key), str(b.GetBondType())))
    return tuple(sorted(out))


def _parity(atom: Chem.Atom) -> int | None:
    """+1/-1 for the chiral tag read against neighbours sorted by map number; None if unset."""
    tag = atom.GetChiralTag()
    if tag not in (Chem.ChiralType.CHI_TETRAHEDRAL_CW, Chem.ChiralType.CHI_TETRAHEDRAL_CCW):
        return None
    maps = [n.GetAtomMapNum() for n in atom.GetNeighbors()]
    if 0 in maps:
        return None
    inv = sum(1 for i in range(len(maps)) for j in range(i + 1, len(maps)) if maps[i] > maps[j])
    sign = 1 if tag == Chem.ChiralType.CHI_TETRAHEDRAL_CW else -1
    return sign * (1 if inv % 2 == 0 else -1)


def _double_bond_stereo(mol: Chem.Mol) -> dict[frozenset[int], bool]:
    out = {}
    for b in mol.GetBonds():
        if b.GetBondType() == Chem.BondType.DOUBLE:
            key = frozenset((b.GetBeginAtom().GetAtomMapNum(), b.GetEndAtom().GetAtomMapNum()))
            out[key] = b.GetStereo() != Chem.BondStereo.STEREONONE
    return out


def sear_signature(reactants: Chem.Mol, product: Chem.Mol, rmap: dict[int, int], reacting) -> str:
    """``sear`` stage: ring positions (o/m/p) of the other substituents around an aromatic C-H that
    was substituted (SEAr), as ``"SEAr:..."``; ``""`` when no aromatic C-H was substituted."""
    sigs = []
    ring_info = product.GetRingInfo()
    for p in product.GetAtoms():
        m = p.GetAtomMapNum()
        if m not in reacting or not p.GetIsAromatic() or p.GetSymbol() != "C":
            continue
        r = reactants.GetAtomWithIdx(rmap[m])
        if r.GetTotalNumHs() != p.GetTotalNumHs() + 1 or p.GetDegree() != r.GetDegree() + 1:
            continue
        ring = next((rg for rg in ring_info.AtomRings() if p.GetIdx() in rg and len(rg) == 6), None)
        if ring is None:
            continue
        pos = ring.index(p.GetIdx())
        subs = []
        for k, ai in enumerate(ring):
            if ai == p.GetIdx():
                continue
            d = min((k - pos) % 6, (pos - k) % 6)
            for n in product.GetAtomWithIdx(ai).GetNeighbors():
                if n.GetIdx() not in ring and n.GetAtomMapNum() not in reacting:
                    subs.append("omp"[d - 1] + n.GetSymbol())
        sigs.append("".join(sorted(subs)))
    return ("SEAr:" + ",".join(sorted(sigs))) if sigs else ""


def validate_molecules(reac_smiles: str, prod_smiles: str) -> tuple[Chem.Mol, Chem.Mol]:
    """``validator`` stage: both sides parse and sanitise, the product is one molecule with a
    carbon atom. Returns ``(reactants, product)`` (the reactants as one, maybe disconnected, mol)."""
    reactants = parse_side(reac_smiles, "reactants")
    product = parse_side(prod_smiles, "product")
    if len(Chem.GetMolFrags(product)) != 1:
        raise ProcessingError("validator", "the product must be one molecule")
    if not any(a.GetAtomicNum() == 6 for a in product.GetAtoms()):
        raise ProcessingError("validator", "the product has no carbon atom")
    return reactants, product


def check_product_maps(product: Chem.Mol) -> list[int]:
    """``mapping`` stage: every product atom carries a distinct atom-map number; returns them."""
    pmaps = [a.GetAtomMapNum() for a in product.GetAtoms()]
    if any(m == 0 for m in pmaps):
        raise ProcessingError("mapping", "product atoms without atom-map numbers")
    if len(set(pmaps)) != len(pmaps):
        raise ProcessingError("mapping", "duplicate atom-map numbers in the product")
    return pmaps


def remove_orphans(
    reactants: Chem.Mol, product_maps: list[int], agents: str = ""
) -> tuple[Chem.Mol, list[str]]:
    """``orphan`` stage: reactant molecules with no atom in the product become agents.

    Returns the contributing reactants (one mol) and the agent SMILES (``agents`` first). Raises
    ``orphan`` when nothing contributes, ``mapping`` on duplicate reactant map numbers."""
    pset = set(product_maps)
    agent_list = [s for s in agents.split(".") if s]
    kept = []
    for frag in Chem.GetMolFrags(reactants, asMols=True, sanitizeFrags=False):
        if any(a.GetAtomMapNum() in pset for a in frag.GetAtoms()):
            kept.append(frag)
        else:
            agent_list.append(_strip(frag))
    if not kept:
        raise ProcessingError("orphan", "no reactant contributes an atom to the product")
    out = kept[0]
    for frag in kept[1:]:
        out = Chem.CombineMols(out, frag)
    rmaps = [a.GetAtomMapNum() for a in out.GetAtoms() if a.GetAtomMapNum()]
    if len(set(rmaps)) != len(rmaps):
        raise ProcessingError("mapping", "duplicate atom-map numbers among the reactants")
    return out, agent_list


def check_balance(reactants: Chem.Mol, product: Chem.Mol) -> dict[int, int]:
    """``balance`` stage (ours): each product atom maps to a reactant atom of the same element.

    Returns ``{map number: reactant atom index}`` for the mapped reactant atoms."""
    rmap = {a.GetAtomMapNum(): a.GetIdx() for a in reactants.GetAtoms() if a.GetAtomMapNum()}
    for p in product.GetAtoms():
        r = rmap.get(p.GetAtomMapNum())
        if r is None:
            raise ProcessingError(
                "balance", f"product atom {p.GetSymbol()}:{p.GetAtomMapNum()} has no source"
            )
        if reactants.GetAtomWithIdx(r).GetAtomicNum() != p.GetAtomicNum():
            raise ProcessingError(
                "balance",
                f"atom map {p.GetAtomMapNum()}: {reactants.GetAtomWithIdx(r).GetSymbol()} -> {p.GetSymbol()}",
            )
    return rmap


def leaving_atoms(reactants: Chem.Mol, product: Chem.Mol) -> dict[int, str]:
    """Reactant atoms (index -> element) whose map number is not in the product."""
    pset = {a.GetAtomMapNum() for a in product.GetAtoms()}
    return {
        a.GetIdx(): a.GetSymbol() for a in reactants.GetAtoms() if a.GetAtomMapNum() not in pset
    }


def reacting_atoms(
    reactants: Chem.Mol, product: Chem.Mol, rmap: dict[int, int], leaving: dict[int, str]
) -> set[int]:
    """``transform`` stage: map numbers of product atoms whose charge, H count, aromaticity or
    neighbour table (neighbour map numbers and bond orders; leaving atoms by element) changes."""
    reacting = set()
    for p in product.GetAtoms():
        m, pi = p.GetAtomMapNum(), p.GetIdx()
        r = reactants.GetAtomWithIdx(rmap[m])
        if (
            p.GetFormalCharge() != r.GetFormalCharge()
            or p.GetTotalNumHs() != r.GetTotalNumHs()
            or p.GetIsAromatic() != r.GetIsAromatic()
            or _neighbour_table(product, pi, {}) != _neighbour_table(reactants, rmap[m], leaving)
        ):
            reacting.add(m)
    return reacting


def check_skeleton(reactants: Chem.Mol, leaving: dict[int, str]) -> None:
    """``skeleton`` stage: no pure-carbon fragment may be lost across a broken C-C bond (a single
    carbon lost across a double bond, =CH2 cleavage, is exempt)."""
    for b in reactants.GetBonds():
        a1, a2 = b.GetBeginAtom(), b.GetEndAtom()
        for kept_atom, lost in ((a1, a2), (a2, a1)):
            if kept_atom.GetIdx() in leaving or lost.GetIdx() not in leaving:
                continue
            if kept_atom.GetAtomicNum() != 6 or lost.GetAtomicNum() != 6:
                continue
            comp, stack = {lost.GetIdx()}, [lost.GetIdx()]
            while stack:
                for n in reactants.GetAtomWithIdx(stack.pop()).GetNeighbors():
                    if n.GetIdx() in leaving and n.GetIdx() not in comp:
                        comp.add(n.GetIdx())
                        stack.append(n.GetIdx())
            if all(reactants.GetAtomWithIdx(i).GetAtomicNum() == 6 for i in comp):
                if len(comp) == 1 and b.GetBondType() == Chem.BondType.DOUBLE:
                    continue  # =CH2 cleavage is exempt
                raise ProcessingError(
                    "skeleton",
                    f"pure-carbon fragment of {len(comp)} atom(s) lost across a C-C bond",
                )


_SPECIFIED = (Chem.ChiralType.CHI_TETRAHEDRAL_CW, Chem.ChiralType.CHI_TETRAHEDRAL_CCW)


def count_sis(
    reactants: Chem.Mol,
    product: Chem.Mol,
    rmap: dict[int, int],
    *,
    max_tetra: int = 2,
    max_ez: int = 1,
) -> tuple[int, int]:
    """``sis`` stage: ``(tetrahedral, E/Z)`` counts of "unspecified -> specified" stereo
    resolutions; more than ``max_tetra`` / ``max_ez`` in one step fails."""
    n_tetra = sum(
        1
        for p in product.GetAtoms()
        if p.GetChiralTag() in _SPECIFIED
        and reactants.GetAtomWithIdx(rmap[p.GetAtomMapNum()]).GetChiralTag() not in _SPECIFIED
    )
    pdb, rdb = _double_bond_stereo(product), _double_bond_stereo(reactants)
    n_ez = sum(1 for k, s in pdb.items() if s and not rdb.get(k, False))
    if n_tetra > max_tetra or n_ez > max_ez:
        raise ProcessingError(
            "sis", f"{n_tetra} tetrahedral / {n_ez} E/Z stereo resolutions in one step"
        )
    return n_tetra, n_ez


def check_static_stereo(
    reactants: Chem.Mol, product: Chem.Mol, rmap: dict[int, int], reacting: set[int]
) -> None:
    """``static_stereo`` stage: a specified stereocentre that does not react keeps its parity
    (read against neighbours sorted by map number)."""
    for p in product.GetAtoms():
        m = p.GetAtomMapNum()
        if m in reacting:
            continue
        pp, rp = _parity(p), _parity(reactants.GetAtomWithIdx(rmap[m]))
        if pp is not None and rp is not None and pp != rp:
            raise ProcessingError("static_stereo", f"atom map {m} inverts without reacting")


def process_mapped(
    reac_smiles: str, prod_smiles: str, agents: str = "", *, max_tetra: int = 2, max_ez: int = 1
) -> Processed:
    """Run the stages after mapping on an atom-mapped reaction. Raises :class:`ProcessingError`.

    The composition of the stage functions above, in the official order; a reaction in which
    nothing changes (no reacting atom, no stereo resolution) fails at ``transform`` last, after
    the stereo checks, so that an inversion without reaction is reported as ``static_stereo``."""
    reactants_all, product = validate_molecules(reac_smiles, prod_smiles)
    pmaps = check_product_maps(product)
    reactants, agent_list = remove_orphans(reactants_all, pmaps, agents)
    rmap = check_balance(reactants, product)
    leaving = leaving_atoms(reactants, product)
    reacting = reacting_atoms(reactants, product, rmap, leaving)
    check_skeleton(reactants, leaving)
    canonical = canonical_reaction(reactants, product)
    n_tetra, n_ez = count_sis(reactants, product, rmap, max_tetra=max_tetra, max_ez=max_ez)
    check_static_stereo(reactants, product, rmap, reacting)
    sear = sear_signature(reactants, product, rmap, reacting)
    if not reacting and n_tetra + n_ez == 0:
        raise ProcessingError("transform", "no atom changes: reactant equals product")
    return Processed(
        reactants=reactants,
        product=product,
        agents=agent_list,
        reacting=frozenset(reacting),
        leaving=frozenset(leaving),
        canonical=canonical,
        n_tetra_resolved=n_tetra,
        n_ez_resolved=n_ez,
        sear_signature=sear,
    )
