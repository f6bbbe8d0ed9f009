"""Our forward reaction templates (RDKit reaction SMARTS) with exclusion SMARTS, and their
application into atom-mapped reaction SMILES with exact ground truth.

Each :class:`Template` has one SMARTS per reactant role; a reactant qualifies for a role when the
role pattern matches it exactly once and none of the role's exclusion patterns matches (groups
the chemistry does not tolerate, e.g. a free OH next to a Grignard reagent). Applying a template
maps every product atom to the reactant atom it came from (RDKit's ``react_idx`` /
``react_atom_idx`` product-atom properties), so the mapped reaction is exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from rdkit import Chem
from rdkit.Chem import AllChem

__all__ = [
    "Template",
    "TEMPLATES",
    "RULES",
    "template_by_name",
    "apply_template",
    "qualifies",
    "lofo_exclusions",
]

#: how a reactant is checked against a role: ``hand`` = the template's own exclusion SMARTS
#: (the chemistry the candidates' labels follow); ``lofo`` = the exclusions that the *other*
#: template families list (leave-one-family-out, :func:`lofo_exclusions`), used to generate the
#: precedent DB so that the DB and the forbidden-FG candidates do not share one rule.
RULES = ("hand", "lofo")

_AMINE = "[N;X3;H2,H1;!$(N-[C,S,P]=[O,S,N]);!$(N-a);!$(N[#7,#8]);!$(N-C=C):{m}]"
_NH_OH = ("[OX2H1]", "[NX3;H2,H1;!$(N-[C,S]=[O,S,N])]", "[SX2H1]", "[nH]")


@dataclass(frozen=True)
class Template:
    """A forward template. ``smarts``: RDKit reaction SMARTS; ``exclude[i]``: SMARTS that
    disqualify reactant ``i``; ``family`` groups templates (held out together)."""

    name: str
    smarts: str
    exclude: tuple[tuple[str, ...], ...] = ()
    family: str = ""
    roles: tuple[str, ...] = field(default=())

    @cached_property
    def rxn(self) -> AllChem.ChemicalReaction:
        rxn = AllChem.ReactionFromSmarts(self.smarts)
        rxn.Initialize()
        return rxn

    @cached_property
    def role_patterns(self) -> list[Chem.Mol]:
        return [self.rxn.GetReactantTemplate(i) for i in range(self.rxn.GetNumReactantTemplates())]

    @cached_property
    def exclude_patterns(self) -> list[list[Chem.Mol]]:
        n = self.rxn.GetNumReactantTemplates()
        ex = list(self.exclude) + [()] * (n - len(self.exclude))
        return [[Chem.MolFromSmarts(s) for s in e] for e in ex]


def qualifies(t: Template, role: int, mol: Chem.Mol, rule: str = "hand") -> bool:
    """``mol`` matches role ``role`` of ``t`` exactly once and passes the exclusions of ``rule``.

    ``hand``: no match of the template's own exclusion SMARTS for that role. ``lofo``: no match
    of :func:`lofo_exclusions` that lies wholly outside the role's matched atoms (a match that
    shares an atom with the role's own group, e.g. the acid's OH in an acid role, is that group,
    not a second one)."""
    matches = mol.GetSubstructMatches(t.role_patterns[role], maxMatches=2)
    if len(matches) != 1:
        return False
    if rule == "hand":
        return not any(mol.HasSubstructMatch(p) for p in t.exclude_patterns[role])
    if rule == "lofo":
        own = set(matches[0])
        return not any(
            own.isdisjoint(m) for p in _lofo_patterns(t)[role] for m in mol.GetSubstructMatches(p)
        )
    raise ValueError(f"rule must be one of {RULES}; got {rule!r}")


def _role_smarts(t: Template) -> list[str]:
    return t.smarts.split(">>")[0].split(".")


def lofo_exclusions(
    t: Template, templates: tuple[Template, ...] | None = None, min_families: int = 2
) -> tuple[tuple[str, ...], ...]:
    """Leave-one-family-out exclusions of ``t``, per reactant role.

    The exclusion SMARTS (of any role) that at least ``min_families`` template families *other
    than* ``t.family`` list (the groups the rest of the chemistry treats as reactive), minus every
    SMARTS in ``t``'s own exclusion lists. No SMARTS that defines a forbidden-FG candidate of ``t``
    (:func:`icml26.chemcensor.data.generate` with ``forbidden=True``) keeps anything out of ``t``'s
    reactions generated under this rule, so a precedent DB built from them catches such a
    candidate only through correlated groups, never by construction. A SMARTS written inside a
    role's own SMARTS (SNAr's activating nitro) is not an exclusion for that role.
    """
    templates = TEMPLATES if templates is None else templates
    fams: dict[str, set[str]] = {}
    for o in templates:
        if o.family == t.family:
            continue
        for role in o.exclude:
            for sm in role:
                fams.setdefault(sm, set()).add(o.family)
    own = {sm for role in t.exclude for sm in role}
    pooled = sorted(sm for sm, f in fams.items() if len(f) >= min_families and sm not in own)
    return tuple(tuple(sm for sm in pooled if sm not in rs) for rs in _role_smarts(t))


_LOFO: dict[str, list[list[Chem.Mol]]] = {}


def _lofo_patterns(t: Template) -> list[list[Chem.Mol]]:
    if t.name not in _LOFO:
        _LOFO[t.name] = [[Chem.MolFromSmarts(s) for s in r] for r in lofo_exclusions(t)]
    return _LOFO[t.name]


def _t(name, smarts, exclude=(), family=None):
    return Template(name, smarts, tuple(tuple(e) for e in exclude), family or name)


A = _AMINE.format
TEMPLATES: tuple[Template, ...] = (
    _t(
        "amide_from_acid",
        f"[C:1](=[O:2])[OX2H1].{A(m=3)}>>[C:1](=[O:2])[N:3]",
        [
            ("[NX3;H2,H1;!$(N-[C,S]=[O,S,N])]", "[SX2H1]"),
            ("[CX3](=O)[OX2H1]", "[CX3](=O)Cl", "[OX2H1]"),
        ],
        "amide",
    ),
    _t(
        "amide_from_acyl_chloride",
        f"[C:1](=[O:2])Cl.{A(m=3)}>>[C:1](=[O:2])[N:3]",
        [_NH_OH, ("[CX3](=O)[OX2H1]", "[OX2H1]", "[SX2H1]")],
        "amide",
    ),
    _t(
        "ester_from_acid",
        "[C:1](=[O:2])[OX2H1].[OX2H1;$(O[CX4]);!$(OC=O):3]>>[C:1](=[O:2])[O:3]",
        [
            ("[NX3;H2,H1;!$(N-[C,S]=[O,S,N])]", "[SX2H1]"),
            ("[NX3;H2,H1;!$(N-[C,S]=[O,S,N])]", "[CX3](=O)[OX2H1]"),
        ],
        "ester",
    ),
    _t(
        "ester_from_acyl_chloride",
        "[C:1](=[O:2])Cl.[OX2H1;$(O[CX4]),$(Oc);!$(OC=O):3]>>[C:1](=[O:2])[O:3]",
        [_NH_OH, ("[NX3;H2,H1;!$(N-[C,S]=[O,S,N])]", "[CX3](=O)[OX2H1]")],
        "ester",
    ),
    _t("suzuki", "[c:1][BX3]([OH])[OH].[c:2][Br,I]>>[c:1]-[c:2]", [(), ("[BX3]",)], "suzuki"),
    _t(
        "buchwald_hartwig",
        f"[c:1][Br,I].{A(m=2)}>>[c:1][N:2]",
        [("[OX2H1]", "[BX3]", "[CX3](=O)[OX2H1]"), ("[OX2H1]", "[CX3](=O)[OX2H1]")],
        "buchwald",
    ),
    _t(
        "snar",
        "[c;$(c:c[N+](=O)[O-]),$(c:c:c:c[N+](=O)[O-]),$(c:n):1][F,Cl]." + A(m=2) + ">>[c:1][N:2]",
        [("[CX3](=O)Cl",), ("[CX3](=O)[OX2H1]", "[CX3](=O)Cl")],
        "snar",
    ),
    _t(
        "reductive_amination",
        f"[CX3;H1:1](=O)[#6:4].{A(m=2)}>>[C:1]([#6:4])[N:2]",
        [
            ("[CX3](=O)[OX2H1]", "[CX3](=O)Cl", "[NX3;H2,H1;!$(N-[C,S]=[O,S,N])]"),
            ("[CX3;H1]=O", "[CX3](=O)Cl"),
        ],
        "reductive_amination",
    ),
    _t(
        "boc_protection",
        f"{A(m=1)}.[C:2](=[O:3])([O:4][C:5]([CH3:6])([CH3:7])[CH3:8])OC(=O)OC(C)(C)C"
        ">>[N:1][C:2](=[O:3])[O:4][C:5]([C:6])([C:7])[C:8]",
        [("[CX3](=O)Cl",), ()],
        "boc",
    ),
    _t("boc_deprotection", "[N:1][C](=O)O[C]([CH3])([CH3])[CH3]>>[N:1]", [()], "boc"),
    _t(
        "cbz_deprotection",
        "[N:1][C](=O)O[CH2]c1ccccc1>>[N:1]",
        [("[CX3]=[CX3]", "[CX2]#[CX2]", "[N+](=O)[O-]")],
        "cbz",
    ),
    _t(
        "williamson",
        "[OX2H1;$(O[CX4]),$(Oc);!$(OC=O):1].[CH2,CH3;X4:2][Br,I]>>[O:1][C:2]",
        [("[NX3;H2,H1;!$(N-[C,S]=[O,S,N])]", "[CX3](=O)[OX2H1]", "[SX2H1]"), ()],
        "williamson",
    ),
    _t(
        "n_alkylation",
        f"{A(m=1)}.[CH2,CH3;X4:2][Br,I]>>[N:1][C:2]",
        [("[OX2H1]", "[CX3](=O)Cl", "[CX3;H1]=O"), ()],
        "n_alkylation",
    ),
    _t(
        "grignard_ketone",
        "[#6:3][CX3:1](=[O:2])[#6:4].[#6:5][Mg]Br>>[#6:3][C:1]([O:2])([#6:4])[#6:5]",
        [
            _NH_OH + ("[CX3](=O)[OX2H1]", "[CX3](=O)[O,N,Cl]", "[N+](=O)[O-]", "C#N", "[CX3;H1]=O"),
            (),
        ],
        "grignard",
    ),
    _t(
        "grignard_aldehyde",
        "[#6:3][CX3;H1:1]=[O:2].[#6:5][Mg]Br>>[#6:3][C:1]([O:2])[#6:5]",
        [
            _NH_OH
            + ("[CX3](=O)[OX2H1]", "[CX3](=O)[O,N,Cl]", "[N+](=O)[O-]", "C#N", "[#6][CX3](=O)[#6]"),
            (),
        ],
        "grignard",
    ),
    _t(
        "sulfonamide",
        f"[S:1](=[O:2])(=[O:3])Cl.{A(m=4)}>>[S:1](=[O:2])(=[O:3])[N:4]",
        [_NH_OH, ("[OX2H1]", "[CX3](=O)Cl")],
        "sulfonamide",
    ),
    _t(
        "urea",
        f"[N:1]=[C:2]=[O:3].{A(m=4)}>>[N:1][C:2](=[O:3])[N:4]",
        [_NH_OH, ("[OX2H1]", "[SX2H1]")],
        "urea",
    ),
    _t(
        "carbamate",
        f"{A(m=1)}.Cl[C:2](=[O:3])[O:4][#6:5]>>[N:1][C:2](=[O:3])[O:4][#6:5]",
        [("[OX2H1]", "[SX2H1]", "[CX3](=O)Cl"), ()],
        "carbamate",
    ),
    _t(
        "ester_hydrolysis",
        "[C:1](=[O:2])[O:3][CH3]>>[C:1](=[O:2])[O:3]",
        [("[CX3](=O)Cl",)],
        "ester_hydrolysis",
    ),
    _t(
        "nitro_reduction",
        "[c:1][N+:2](=[O:3])[O-]>>[c:1][N+0:2]",
        [("[CX3;H1]=O", "[Br,I]")],
        "nitro_reduction",
    ),
    _t(
        "sonogashira",
        "[c:1][Br,I].[CH1:2]#[C:3]>>[c:1][C:2]#[C:3]",
        [("[OX2H1]", "[BX3]"), ()],
        "sonogashira",
    ),
    _t(
        "ketone_reduction",
        "[#6:3][CX3:1](=[O:2])[#6:4]>>[#6:3][C:1]([O:2])[#6:4]",
        [("[CX3;H1]=O", "[CX3](=O)Cl", "[N+](=O)[O-]")],
        "ketone_reduction",
    ),
)


def template_by_name(name: str) -> Template:
    for t in TEMPLATES:
        if t.name == name:
            return t
    raise ValueError(f"unknown template {name!r}; known: {', '.join(t.name for t in TEMPLATES)}")


def apply_template(t: Template, reactants: list[Chem.Mol], *, check: bool = True) -> list[str]:
    """Mapped reaction SMILES ``r1.r2>>p`` of applying ``t`` to ``reactants`` (one per distinct
    product; empty when it does not apply or, with ``check``, a reactant does not qualify)."""
    if len(reactants) != t.rxn.GetNumReactantTemplates():
        return []
    if check and not all(qualifies(t, i, m) for i, m in enumerate(reactants)):
        return []
    out, seen = [], set()
    for prods in t.rxn.RunReactants(tuple(reactants)):
        if len(prods) != 1:
            continue
        prod = Chem.Mol(prods[0])
        try:
            Chem.SanitizeMol(prod)
        except Exception:
            continue
        canon = Chem.MolToSmiles(prod)
        if canon in seen or Chem.MolFromSmiles(canon) is None:
            continue
        seen.add(canon)
        rs = [Chem.Mol(m) for m in reactants]
        for m in rs:
            for a in m.GetAtoms():
                a.SetAtomMapNum(0)
        nxt = 1
        for a in prod.GetAtoms():
            if not a.HasProp("react_atom_idx"):
                break
            src = rs[a.GetIntProp("react_idx")].GetAtomWithIdx(a.GetIntProp("react_atom_idx"))
            if src.GetAtomMapNum() == 0:
                src.SetAtomMapNum(nxt)
                nxt += 1
            a.SetAtomMapNum(src.GetAtomMapNum())
        else:
            out.append(".".join(Chem.MolToSmiles(m) for m in rs) + ">>" + Chem.MolToSmiles(prod))
    return out
