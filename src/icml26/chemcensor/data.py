"""Generated reaction data with exact ground truth, and retrosynthesis candidates per target.

Reactions come from applying :data:`TEMPLATES` to RDKit's bundled molecules (NCI ``first_5K``,
the FreeWilson ChEMBL set, the ZINC sample of SA_Score) paired with a small list of common
building blocks. No reaction data set is packaged offline, so these are *generated*: realistic
molecules, textbook transformations, exact atom maps.

Candidate classes for a held-out target (:func:`candidates`): (a) the gold reactants; (b) a valid
alternative (another precedented template or the same template with the partners' roles swapped,
found by converting reagents: acid <-> acyl chloride, aryl boronic acid <-> aryl bromide, alkyl
bromide <-> aldehyde); (c) corrupted (bad valence, unbalanced, invalid SMILES); (d) implausible
(a random non-template bond cut of the target). :func:`generate` with ``forbidden=True`` applies
templates to reactants that carry an excluded FG (a Grignard next to a free OH): more (d).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from itertools import permutations, product

from rdkit import Chem, RDConfig
from rdkit.Chem import AllChem

from icml26.chemcensor.reaction import ProcessingError, process_mapped
from icml26.chemcensor.templates import RULES, TEMPLATES, Template, apply_template, qualifies

__all__ = [
    "BUILDING_BLOCKS",
    "GenReaction",
    "molecule_pool",
    "generate",
    "candidates",
    "canon",
    "unmapped",
]

BUILDING_BLOCKS = (
    "CN",
    "CNC",
    "NCc1ccccc1",
    "C1COCCN1",
    "C1CCNCC1",
    "CC(C)(C)OC(=O)N1CCNCC1",
    "NC1CC1",
    "CC(C)N",
    "NCc1ccc(F)cc1",
    "C1CCNC1",
    "COCCN",
    "CNCc1ccccc1",
    "CC1CCNCC1",
    "CC(C)(C)N",
    "CC(=O)O",
    "OC(=O)c1ccccc1",
    "OC(=O)c1ccc(Cl)cc1",
    "OC(=O)C1CCCCC1",
    "OC(=O)c1cccnc1",
    "CCC(=O)O",
    "OC(=O)c1ccco1",
    "CC(C)C(=O)O",
    "OC(=O)Cc1ccccc1",
    "COc1cccc(C(=O)O)c1",
    "CC(=O)Cl",
    "ClC(=O)c1ccccc1",
    "ClC(=O)C1CC1",
    "CC(C)C(=O)Cl",
    "CO",
    "CCO",
    "CC(C)O",
    "OCc1ccccc1",
    "COCCO",
    "OC1CCCCC1",
    "CCCO",
    "OB(O)c1ccccc1",
    "COc1ccc(B(O)O)cc1",
    "OB(O)c1ccc(F)cc1",
    "OB(O)c1cccnc1",
    "Cc1ccc(B(O)O)cc1",
    "OB(O)c1cccs1",
    "OB(O)c1cccc(Cl)c1",
    "Brc1ccccc1",
    "COc1ccc(Br)cc1",
    "Cc1ccc(Br)cc1",
    "Brc1cccnc1",
    "N#Cc1ccc(Br)cc1",
    "Brc1cccs1",
    "Fc1ccc(Br)cc1",
    "Cc1ccc(I)cc1",
    "CI",
    "CCBr",
    "BrCc1ccccc1",
    "C=CCBr",
    "CCCBr",
    "COc1ccc(CBr)cc1",
    "COCCBr",
    "C[Mg]Br",
    "CC[Mg]Br",
    "Br[Mg]c1ccccc1",
    "CC(C)[Mg]Br",
    "C=C[Mg]Br",
    "COc1ccc([Mg]Br)cc1",
    "Br[Mg]C1CC1",
    "O=Cc1ccccc1",
    "O=Cc1ccc(Cl)cc1",
    "CC(C)C=O",
    "O=CC1CCCCC1",
    "O=Cc1cccnc1",
    "CC(C)=O",
    "O=C1CCCCC1",
    "CC(=O)c1ccccc1",
    "CS(=O)(=O)Cl",
    "Cc1ccc(S(=O)(=O)Cl)cc1",
    "O=S(=O)(Cl)c1ccccc1",
    "O=C=Nc1ccccc1",
    "CCN=C=O",
    "O=C=Nc1ccc(Cl)cc1",
    "COC(=O)Cl",
    "CCOC(=O)Cl",
    "O=C(Cl)OCc1ccccc1",
    "C#Cc1ccccc1",
    "C#C[Si](C)(C)C",
    "C#CCCCC",
    "O=[N+]([O-])c1ccc(F)cc1",
    "Clc1ccccn1",
    "O=[N+]([O-])c1ccc(Cl)nc1",
    "CC(C)(C)OC(=O)OC(=O)OC(C)(C)C",
)

_CONVERSIONS = tuple(
    AllChem.ReactionFromSmarts(s)
    for s in (
        "[C:1](=[O:2])[OX2H1]>>[C:1](=[O:2])Cl",
        "[C:1](=[O:2])Cl>>[C:1](=[O:2])O",
        "[c:1][BX3]([OH])[OH]>>[c:1]Br",
        "[c:1][Br,I]>>[c:1]B(O)O",
        "[CH2;X4:1]([#6:2])[Br,I]>>[CH1:1]([#6:2])=O",
        "[CH1:1]([#6:2])=O>>[CH2:1]([#6:2])Br",
    )
)


@dataclass(frozen=True)
class GenReaction:
    """One generated reaction: ``template`` name, its ``family``, the atom-mapped ``mapped`` SMILES,
    the canonical map-free ``reactants`` (sorted) and ``product``. ``hand_ok`` / ``lofo_ok``: every
    reactant passes its role's exclusions under the ``hand`` / ``lofo`` rule
    (:func:`icml26.chemcensor.templates.qualifies`)."""

    template: str
    family: str
    mapped: str
    reactants: tuple[str, ...]
    product: str
    hand_ok: bool = True
    lofo_ok: bool = True

    @property
    def rxn(self) -> str:
        return ".".join(self.reactants) + ">>" + self.product


def canon(smiles: str) -> str | None:
    m = Chem.MolFromSmiles(smiles)
    return None if m is None else Chem.MolToSmiles(m)


def unmapped(mapped: str) -> tuple[tuple[str, ...], str]:
    """Canonical map-free (sorted reactants, product) of a mapped reaction SMILES."""
    reac, _, prod = mapped.split(">")
    rs = []
    for s in reac.split("."):
        m = Chem.MolFromSmiles(s)
        for a in m.GetAtoms():
            a.SetAtomMapNum(0)
        rs.append(Chem.MolToSmiles(m))
    p = Chem.MolFromSmiles(prod)
    for a in p.GetAtoms():
        a.SetAtomMapNum(0)
    return tuple(sorted(rs)), Chem.MolToSmiles(p)


def molecule_pool(max_heavy: int = 35, limit: int | None = None, seed: int = 0) -> list[Chem.Mol]:
    """RDKit's bundled molecules (largest fragment, sanitised, 6..max_heavy heavy atoms, unique)."""
    files = [
        (os.path.join(RDConfig.RDDataDir, "NCI", "first_5K.smi"), 0),
        (os.path.join(RDConfig.RDContribDir, "FreeWilson", "data", "CHEMBL2321810.smi"), 0),
        (os.path.join(RDConfig.RDContribDir, "SA_Score", "data", "zim.100.txt"), 0),
    ]
    seen, out = set(), []
    for path, col in files:
        if not os.path.exists(path):
            continue
        with open(path) as fh:
            for line in fh:
                parts = line.split()
                if not parts or parts[0] == "smiles":
                    continue
                m = Chem.MolFromSmiles(parts[col])
                if m is None:
                    continue
                frags = Chem.GetMolFrags(m, asMols=True)
                m = max(frags, key=lambda f: f.GetNumHeavyAtoms())
                if not 6 <= m.GetNumHeavyAtoms() <= max_heavy or any(
                    a.GetFormalCharge() and a.GetSymbol() != "N" and a.GetSymbol() != "O"
                    for a in m.GetAtoms()
                ):
                    continue
                if any(
                    a.GetSymbol() not in ("C", "N", "O", "S", "F", "Cl", "Br", "I", "B", "P")
                    for a in m.GetAtoms()
                ):
                    continue
                s = Chem.MolToSmiles(m)
                if s not in seen:
                    seen.add(s)
                    out.append(Chem.MolFromSmiles(s))
    random.Random(seed).shuffle(out)
    return out[:limit] if limit else out


def _record(t: Template, mapped: str, rs: list[Chem.Mol] | None = None) -> GenReaction:
    reactants, prod = unmapped(mapped)
    if rs is None:
        return GenReaction(t.name, t.family, mapped, reactants, prod)
    ok = {r: all(qualifies(t, i, m, r) for i, m in enumerate(rs)) for r in ("hand", "lofo")}
    return GenReaction(t.name, t.family, mapped, reactants, prod, ok["hand"], ok["lofo"])


def generate(
    mols: list[Chem.Mol],
    n: int,
    templates=TEMPLATES,
    *,
    seed: int = 0,
    forbidden: bool = False,
    rule: str = "hand",
    progress=None,
) -> list[GenReaction]:
    """Up to ``n`` distinct reactions, templates taken round-robin; a molecule from ``mols`` takes
    one role, building blocks the others, each qualifying under ``rule`` (``hand``: the template's
    own exclusions; ``lofo``: the other families' exclusions, see
    :func:`icml26.chemcensor.templates.lofo_exclusions`). ``forbidden``: the main molecule matches
    its role but carries an FG that the template's own (``hand``) exclusions forbid, partners
    qualify under ``hand`` (the reaction is implausible by the chemistry the labels follow)."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}; got {rule!r}")
    part_rule = "hand" if forbidden else rule
    rng = random.Random(seed)
    blocks = [Chem.MolFromSmiles(s) for s in BUILDING_BLOCKS]
    queues = []
    for t in templates:
        nroles = t.rxn.GetNumReactantTemplates()
        for role in range(nroles):
            partners = [[b for b in blocks if qualifies(t, r, b, part_rule)] for r in range(nroles)]
            if any(not partners[r] for r in range(nroles) if r != role):
                continue
            main = []
            for m in mols:
                if forbidden:
                    ok = len(
                        m.GetSubstructMatches(t.role_patterns[role], maxMatches=2)
                    ) == 1 and not qualifies(t, role, m)
                else:
                    ok = qualifies(t, role, m, rule)
                if ok:
                    main.append(m)
            rng.shuffle(main)
            if main:
                queues.append((t, role, partners, main))
    out, seen = [], set()
    tick = progress.task("generating reactions", n) if progress is not None else (lambda k=1: None)
    while queues and len(out) < n:
        for q in list(queues):
            t, role, partners, main = q
            if not main:
                queues.remove(q)
                continue
            m = main.pop()
            rs = [m if r == role else rng.choice(partners[r]) for r in range(len(partners))]
            res = apply_template(t, rs, check=False)
            if not res:
                continue
            g = _record(t, res[0], rs)
            if g.rxn in seen or g.product in g.reactants:
                continue
            try:  # keep only reactions the pipeline accepts (e.g. a product with carbon)
                process_mapped(*g.mapped.split(">>"))
            except ProcessingError:
                continue
            seen.add(g.rxn)
            out.append(g)
            tick(1)
            if len(out) >= n:
                break
    return out


def _conversions(mol: Chem.Mol) -> list[Chem.Mol]:
    outs = []
    for rxn in _CONVERSIONS:
        res = rxn.RunReactants((mol,))
        if len(res) != 1:
            continue
        m = Chem.Mol(res[0][0])
        try:
            Chem.SanitizeMol(m)
            outs.append(Chem.MolFromSmiles(Chem.MolToSmiles(m)))
        except Exception:
            continue
    return outs


def alternatives(
    g: GenReaction, templates=TEMPLATES, rng: random.Random | None = None
) -> list[GenReaction]:
    """Valid alternative disconnections of ``g.product``: reagent conversions of the gold
    reactants, applied by any template, that regenerate the product with other reactants."""
    gold = [Chem.MolFromSmiles(s) for s in g.reactants]
    options = [[m, *_conversions(m)] for m in gold]
    found, seen = [], {g.rxn}
    for combo in product(*options):
        for t in templates:
            if t.rxn.GetNumReactantTemplates() != len(combo):
                continue
            for perm in permutations(combo):
                for mapped in apply_template(t, list(perm)):
                    alt = _record(t, mapped)
                    if alt.product == g.product and alt.rxn not in seen:
                        seen.add(alt.rxn)
                        found.append(alt)
    if rng is not None:
        rng.shuffle(found)
    return found


def _mapped_target(product: str) -> Chem.Mol:
    m = Chem.MolFromSmiles(product)
    for a in m.GetAtoms():
        a.SetAtomMapNum(a.GetIdx() + 1)
    return m


def random_cut(g: GenReaction, rng: random.Random) -> str | None:
    """A random acyclic single-bond cut of the target, H-capped: a non-template disconnection."""
    m = _mapped_target(g.product)
    bonds = [
        b.GetIdx()
        for b in m.GetBonds()
        if not b.IsInRing()
        and b.GetBondType() == Chem.BondType.SINGLE
        and b.GetBeginAtom().GetDegree() > 1
        and b.GetEndAtom().GetDegree() > 1
    ]
    rng.shuffle(bonds)
    for bi in bonds:
        rw = Chem.RWMol(m)
        b = rw.GetBondWithIdx(bi)
        rw.RemoveBond(b.GetBeginAtomIdx(), b.GetEndAtomIdx())
        for a in rw.GetAtoms():
            if a.GetIsAromatic() and a.GetSymbol() != "C":
                a.SetNoImplicit(False)
        try:
            Chem.SanitizeMol(rw)
        except Exception:
            continue
        reac = Chem.MolToSmiles(rw)
        if Chem.MolFromSmiles(reac) is None:
            continue
        return reac + ">>" + Chem.MolToSmiles(m)
    return None


def corrupt(g: GenReaction, kind: str, rng: random.Random) -> str:
    """A corrupted proposal of ``kind``: ``valence`` (an atom over its valence), ``unbalanced``
    (a reactant dropped, or a product atom without source) or ``invalid`` (unparseable SMILES)."""
    reac, _, prod = g.mapped.split(">")
    parts = reac.split(".")
    if kind == "invalid":
        i = rng.randrange(len(parts))
        parts[i] = parts[i] + "(C1"
        return ".".join(parts) + ">>" + prod
    if kind == "unbalanced":
        contributing = [
            p for p in parts if any(a.GetAtomMapNum() for a in Chem.MolFromSmiles(p).GetAtoms())
        ]
        if len(contributing) > 1:
            drop = rng.choice(contributing)
            return ".".join(p for p in parts if p != drop) + ">>" + prod
        rw = Chem.RWMol(Chem.MolFromSmiles(contributing[0]))
        term = [a.GetIdx() for a in rw.GetAtoms() if a.GetDegree() == 1 and a.GetAtomMapNum()]
        rw.RemoveAtom(rng.choice(term) if term else rw.GetNumAtoms() - 1)
        Chem.SanitizeMol(rw, catchErrors=True)
        others = [p for p in parts if p != contributing[0]]
        return ".".join([Chem.MolToSmiles(rw), *others]) + ">>" + prod
    if kind == "valence":
        i = rng.randrange(len(parts))
        m = Chem.MolFromSmiles(parts[i])
        heavy = [a for a in m.GetAtoms() if a.GetDegree() >= 2 and a.GetSymbol() == "C"] or list(
            m.GetAtoms()
        )
        a = rng.choice(heavy)
        a.SetAtomicNum(9)  # fluorine with >= 2 bonds
        a.SetNoImplicit(True)
        parts[i] = Chem.MolToSmiles(m, canonical=False)
        return ".".join(parts) + ">>" + prod
    raise ValueError(f"corrupt kind must be valence, unbalanced or invalid; got {kind!r}")


def candidates(
    g: GenReaction, rng: random.Random, templates=TEMPLATES, corrupt_kind: str = "invalid"
) -> dict[str, str | None]:
    """Atom-mapped proposals for the target of ``g``: keys ``a``, ``b`` (None if no alternative), ``c``, ``d``."""
    alts = alternatives(g, templates, rng)
    return {
        "a": g.mapped,
        "b": alts[0].mapped if alts else None,
        "c": corrupt(g, corrupt_kind, rng),
        "d": random_cut(g, rng),
    }
