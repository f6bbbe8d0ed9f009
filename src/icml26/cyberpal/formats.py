"""Expert reasoning formats: ordered, typed slots that a writer fills and a verifier checks.

A format is a small YAML file (defaults ship in ``formats/``; users copy and edit them)::

    name: cve2cwe_cot
    task: cve2cwe            # cve2cwe | cwe_qa | attack_qa
    system: You are a security analyst. ...
    slots:                   # rendered in order, one "Label: value" line each
      - {label: Impact, type: consequence}
      - {label: Category, type: parent_cwe}
      - {label: Definition, type: quote}
      - {label: Answer, type: answer}

Slot types and what the verifier checks for each (see :mod:`icml26.cyberpal.verify`):

``cwe_id`` ("CWE-79"), ``cwe_name`` (a catalogue name), ``cwe_label`` ("CWE-79: <name>"),
``parent_cwe`` (a view-1000 parent of the answer, as a label), ``capec`` ("CAPEC-63", listed by
the answer's entry), ``consequence`` (one impact listed for the answer), ``quote`` (a quoted
substring of the catalogue text of the answer's entry), ``attack_id`` ("T1003"),
``attack_name``, ``tactic`` (a tactic of the technique), ``text`` (free text, unchecked), and
``answer`` (the final answer; must equal the gold label; exactly one per format, last).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from icml26.core.errors import UserError

__all__ = ["SLOT_TYPES", "TASKS", "Slot", "Format", "load_format", "load_formats",
           "default_formats", "render", "parse", "FORMATS_DIR"]

SLOT_TYPES = ("cwe_id", "cwe_name", "cwe_label", "parent_cwe", "capec", "consequence", "quote",
              "attack_id", "attack_name", "tactic", "text", "answer")
TASKS = ("cve2cwe", "cwe_qa", "attack_qa")
FORMATS_DIR = Path(__file__).parent / "formats"


@dataclass(frozen=True)
class Slot:
    label: str
    type: str

    def __post_init__(self) -> None:
        if self.type not in SLOT_TYPES:
            raise UserError(f"slot {self.label!r}: unknown type {self.type!r}; "
                            f"use one of {', '.join(SLOT_TYPES)}")
        if not self.label or ":" in self.label or "\n" in self.label:
            raise UserError(f"slot label must be a non-empty single line without ':'; "
                            f"got {self.label!r}")


@dataclass(frozen=True)
class Format:
    """An ordered list of typed slots for one task. The last slot is the ``answer``."""

    name: str
    task: str
    slots: tuple[Slot, ...]
    system: str = "You are a cybersecurity analyst. Reason step by step, then answer."

    def __post_init__(self) -> None:
        where = f"format {self.name!r}"
        if self.task not in TASKS:
            raise UserError(f"{where}: task must be one of {', '.join(TASKS)}; got {self.task!r}")
        if not self.slots:
            raise UserError(f"{where}: empty format (no slots)")
        if [s.type for s in self.slots].count("answer") != 1 or self.slots[-1].type != "answer":
            raise UserError(f"{where}: exactly one slot of type 'answer', and it must be last")
        labels = [s.label for s in self.slots]
        if len(set(labels)) != len(labels):
            raise UserError(f"{where}: slot labels must be distinct; got {labels}")

    @property
    def answer_label(self) -> str:
        return self.slots[-1].label

    def to_dict(self) -> dict:
        return {"name": self.name, "task": self.task, "system": self.system,
                "slots": [{"label": s.label, "type": s.type} for s in self.slots]}

    @classmethod
    def from_dict(cls, d: dict, where: str = "format") -> Format:
        if not isinstance(d, dict):
            raise UserError(f"{where}: expected a mapping with name, task, slots; got {type(d).__name__}")
        missing = [k for k in ("name", "task", "slots") if k not in d]
        if missing:
            raise UserError(f"{where}: missing field(s) {', '.join(missing)}")
        if not isinstance(d["slots"], list):
            raise UserError(f"{where}: 'slots' must be a list of {{label, type}}")
        slots = []
        for i, s in enumerate(d["slots"]):
            if not isinstance(s, dict) or "type" not in s:
                raise UserError(f"{where}: slot {i} must be a mapping with 'label' and 'type'")
            slots.append(Slot(str(s.get("label", s["type"].replace("_", " ").title())), str(s["type"])))
        kw = {"system": str(d["system"])} if d.get("system") else {}
        return cls(name=str(d["name"]), task=str(d["task"]), slots=tuple(slots), **kw)


def load_format(path: str | Path) -> Format:
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise UserError(f"cannot read format file {path}: {exc}") from exc
    return Format.from_dict(data, where=str(path))


def load_formats(folder: str | Path) -> dict[str, Format]:
    """Every ``*.yaml`` format in ``folder``, keyed by task (one format per task)."""
    folder = Path(folder)
    files = sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.yml"))
    if not files:
        raise UserError(f"no *.yaml format files in {folder}")
    out: dict[str, Format] = {}
    for f in files:
        fmt = load_format(f)
        if fmt.task in out:
            raise UserError(f"{f}: a second format for task {fmt.task!r} (first: {out[fmt.task].name})")
        out[fmt.task] = fmt
    return out


def default_formats() -> dict[str, Format]:
    """The shipped formats (``src/icml26/cyberpal/formats/*.yaml``)."""
    return load_formats(FORMATS_DIR)


def render(fmt: Format, values: dict[str, str]) -> str:
    """``"Label: value"`` lines in slot order. Every slot needs a one-line, non-empty value."""
    lines = []
    for s in fmt.slots:
        v = values.get(s.label)
        if v is None or not str(v).strip():
            raise ValueError(f"format {fmt.name!r}: no value for slot {s.label!r}")
        lines.append(f"{s.label}: {' '.join(str(v).split())}")
    return "\n".join(lines)


def parse(fmt: Format, text: str) -> dict[str, str]:
    """Slot values found in ``text`` (label -> value; first occurrence; missing slots absent)."""
    labels = {s.label.lower(): s.label for s in fmt.slots}
    out: dict[str, str] = {}
    for line in text.splitlines():
        head, sep, rest = line.partition(":")
        key = head.strip().strip("*#- ").lower()
        if sep and key in labels and labels[key] not in out:
            out[labels[key]] = rest.strip()
    return out
