"""The verifier: every factual claim of a reasoning trace is checked against the catalogues.

A trace is the assistant message of a record, written in a :class:`~.formats.Format`. Checks
(names as reported; a record fails when any check fails, and is dropped with its reasons):

- ``format``: every slot present, in order, with a value;
- ``id_exists``: every ``CWE-n`` / ``Tnnnn`` mentioned exists in the catalogue;
- ``deprecated``: no mentioned CWE is deprecated, no technique revoked or deprecated;
- ``name``: every ``CWE-n: Name`` names its id (exact catalogue name); technique names match;
- ``parent``: a ``parent_cwe`` slot is a view-1000 parent of the answer's CWE;
- ``tactic``: a ``tactic`` slot (or the attack_qa answer) is a tactic of the technique;
- ``quote``: a ``quote`` slot is a verbatim substring (>= 3 words) of the catalogue text of the
  answer's entry (CWE description + extended description, or the technique's description);
- ``consequence`` / ``capec``: listed for the answer's CWE;
- ``answer``: the answer equals a gold label (any gold CWE when a CVE has several).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from icml26.cyberpal.catalog import AttackCatalog, CweCatalog
from icml26.cyberpal.formats import Format, parse

__all__ = ["CHECKS", "Verdict", "verify_trace", "VerifyReport", "answer_of"]

CHECKS = ("format", "id_exists", "deprecated", "name", "parent", "tactic", "quote",
          "consequence", "capec", "answer")
_LABEL_RE = re.compile(r"^CWE-(\d+)\s*:\s*(.+)$")
_ANY_CWE = re.compile(r"\bCWE-(\d+)\b")
_ANY_TECH = re.compile(r"\bT\d{4}(?:\.\d{3})?\b")
_QUOTE_RE = re.compile(r'^["“](.+)["”]$')


def _norm(s: str) -> str:
    return " ".join(s.split()).lower()


@dataclass(frozen=True)
class Verdict:
    ok: bool
    failures: tuple[tuple[str, str], ...] = ()  # (check, reason)

    @property
    def failed_checks(self) -> tuple[str, ...]:
        return tuple(sorted({c for c, _ in self.failures}))


def answer_of(fmt: Format, text: str) -> str | None:
    """The answer slot's value in ``text``, or None."""
    return parse(fmt, text).get(fmt.answer_label)


def _answer_cwe(task: str, value: str | None) -> int | None:
    if value is None or task == "attack_qa":
        return None
    m = _ANY_CWE.search(value)
    return int(m.group(1)) if m else None


def verify_trace(text: str, fmt: Format, meta: dict, cwe: CweCatalog,
                 attack: AttackCatalog | None = None) -> Verdict:
    """Check one trace. ``meta`` holds ``gold`` (list of CWE ids, or tactic names for
    ``attack_qa``) and, for ``attack_qa``, ``technique`` (its id)."""
    fails: list[tuple[str, str]] = []
    values = parse(fmt, text)
    missing = [s.label for s in fmt.slots if not values.get(s.label)]
    if missing:
        fails.append(("format", f"missing slot(s) {', '.join(missing)}"))
    else:
        order = [text.find(f"{s.label}:") for s in fmt.slots]
        if order != sorted(order):
            fails.append(("format", "slots out of order"))

    for m in _ANY_CWE.finditer(text):
        cid = int(m.group(1))
        if cid not in cwe:
            fails.append(("id_exists", f"CWE-{cid} is not in CWE {cwe.version}"))
        elif cwe[cid].deprecated:
            fails.append(("deprecated", f"CWE-{cid} is deprecated"))
    for line in text.splitlines():
        _, _, value = line.partition(":")
        lm = _LABEL_RE.match(value.strip())
        if lm and int(lm.group(1)) in cwe:
            want = cwe[int(lm.group(1))].name
            if _norm(lm.group(2)) != _norm(want):
                fails.append(("name", f"CWE-{lm.group(1)} is {want!r}, not {lm.group(2)!r}"))

    tech = None
    if fmt.task == "attack_qa":
        tid = meta.get("technique")
        if attack is None or tid not in attack:
            fails.append(("id_exists", f"technique {tid!r} not in ATT&CK"))
        else:
            tech = attack[tid]
            if not tech.active:
                fails.append(("deprecated", f"{tid} is revoked or deprecated"))
        for t in _ANY_TECH.findall(text):
            if attack is None or t not in attack:
                fails.append(("id_exists", f"{t} not in ATT&CK"))

    gold = [str(g) for g in meta.get("gold", [])]
    ans_value = values.get(fmt.answer_label)
    ans_cwe = _answer_cwe(fmt.task, ans_value)
    if ans_value is not None:
        if fmt.task == "attack_qa":
            if _norm(ans_value) not in {_norm(g) for g in gold}:
                fails.append(("answer", f"answer {ans_value!r} not in gold {gold}"))
            if tech is not None and _norm(ans_value) not in {_norm(t) for t in tech.tactics}:
                fails.append(("tactic", f"{tech.id} does not serve tactic {ans_value!r}"))
        elif ans_cwe is None or str(ans_cwe) not in gold:
            fails.append(("answer", f"answer {ans_value!r} not in gold CWE-{gold}"))

    for s in fmt.slots:
        v = values.get(s.label)
        if v is None or s.type in ("text", "answer"):
            continue
        _check_slot(s.type, s.label, v, ans_cwe, tech, cwe, fails)
    # one reason per (check, reason)
    fails = list(dict.fromkeys(fails))
    return Verdict(ok=not fails, failures=tuple(fails))


def _check_slot(kind, label, v, ans_cwe, tech, cwe, fails) -> None:
    where = f"slot {label!r}"
    if kind in ("cwe_id", "cwe_label", "parent_cwe"):
        m = _ANY_CWE.search(v)
        if not m:
            fails.append(("format", f"{where}: no CWE id in {v!r}"))
            return
        cid = int(m.group(1))
        if (kind == "parent_cwe" and ans_cwe is not None and ans_cwe in cwe and cid in cwe
                and cid not in cwe.parents(ans_cwe, 1000)):
            fails.append(("parent", f"CWE-{cid} is not a view-1000 parent of CWE-{ans_cwe}"))
    elif kind == "cwe_name":
        if ans_cwe in cwe and _norm(v) != _norm(cwe[ans_cwe].name):
            fails.append(("name", f"{where}: {v!r} is not the name of CWE-{ans_cwe}"))
    elif kind == "quote":
        m = _QUOTE_RE.match(v.strip())
        inner = m.group(1) if m else ""
        if tech is not None:
            source = tech.description
        elif ans_cwe in cwe:
            source = f"{cwe[ans_cwe].description} {cwe[ans_cwe].extended}"
        else:
            source = ""
        if not m or len(inner.split()) < 3 or _norm(inner) not in _norm(source):
            fails.append(("quote", f"{where}: {v[:60]!r} is not a quoted catalogue substring"))
    elif kind == "consequence" and ans_cwe in cwe:
        impacts = {_norm(i) for _, imp in cwe[ans_cwe].consequences for i in imp.split(";")}
        if _norm(v) not in impacts:
            fails.append(("consequence", f"{where}: {v!r} is not a consequence of CWE-{ans_cwe}"))
    elif kind == "capec" and ans_cwe in cwe:
        m = re.search(r"CAPEC-(\d+)", v)
        if not m or int(m.group(1)) not in cwe[ans_cwe].capec:
            fails.append(("capec", f"{where}: {v!r} is not listed for CWE-{ans_cwe}"))
    elif kind == "attack_id" and tech is not None:
        if tech.id not in v:
            fails.append(("id_exists", f"{where}: {v!r} is not {tech.id}"))
    elif kind == "attack_name" and tech is not None:
        if _norm(v) != _norm(tech.name):
            fails.append(("name", f"{where}: {v!r} is not the name of {tech.id}"))
    elif (kind == "tactic" and tech is not None
          and _norm(v) not in {_norm(t) for t in tech.tactics}):
        fails.append(("tactic", f"{where}: {tech.id} does not serve tactic {v!r}"))


@dataclass
class VerifyReport:
    """Counts of a verification pass: kept, dropped, and failures per check."""

    kept: int = 0
    dropped: int = 0
    by_check: Counter = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)  # check -> one reason

    def add(self, verdict: Verdict) -> None:
        if verdict.ok:
            self.kept += 1
            return
        self.dropped += 1
        for c in verdict.failed_checks:
            self.by_check[c] += 1
        for c, reason in verdict.failures:
            self.examples.setdefault(c, reason)

    def to_dict(self) -> dict:
        total = self.kept + self.dropped
        return {"kept": self.kept, "dropped": self.dropped,
                "kept_share": self.kept / total if total else 0.0,
                "by_check": {c: self.by_check.get(c, 0) for c in CHECKS},
                "examples": self.examples}
