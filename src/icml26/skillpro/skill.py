"""Skills, the skill pool, and their on-disk form: one Agent Skills folder (``NAME/SKILL.md``) per skill.

A :class:`Skill` is a procedural option: an *initiation* condition (when to use it), a *policy* of
3-5 steps, and a *termination* condition, plus the statistics Skill-Pro's credit assignment keeps
(``freq``, ``total_gain``, ``avg_gain = total_gain / freq``, ``maturity`` = iterations survived).

SKILL.md layout (the Agent Skills format, https://agentskills.io/specification; the body is what
an agent reads once the skill activates, so it states activation, steps and termination)::

    ---
    name: hypothesis-elimination        # kebab-case, <= 64 chars, equals the folder name
    description: <initiation>           # <= 1024 chars: when to use it (what agents match on)
    metadata:                           # string -> string, as the format requires
      freq: '0.0'
      total_gain: '0.0'
      ...
    ---
    # hypothesis-elimination

    ## When to use
    <initiation>

    ## Steps
    1. first step
    2. second step
    3. third step

    ## When to stop
    <termination>

Import needs the steps (under ``## Steps``, or numbered lines before the first section) and a
``## When to stop`` section (``## Termination`` is read too); metadata values are parsed back to
numbers and a bad one is an error naming the field.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from icml26.core.errors import UserError
from icml26.core.io import atomic_write_json, atomic_write_text

NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
MAX_NAME, MAX_DESCRIPTION = 64, 1024
MIN_STEPS, MAX_STEPS = 3, 5
_STEP_RE = re.compile(r"^\s*(\d+)[.)]\s+(.*\S)\s*$")


def kebab(text: str) -> str:
    """``"HypothesisElimination v2"`` -> ``"hypothesis-elimination-v2"`` (<= 64 chars)."""
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", text)
    out = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:MAX_NAME].strip("-")
    return out or "skill"


@dataclass
class Skill:
    """One skill and its credit statistics. ``steps``: 3-5 one-line instructions."""

    name: str
    initiation: str
    steps: tuple[str, ...]
    termination: str
    freq: float = 0.0
    total_gain: float = 0.0
    maturity: int = 0
    version: int = 1
    parent: str | None = None
    #: iteration the skill (this version) entered the pool; new skills are protected for a while
    born: int = 0
    cooldown: int = 0

    def __post_init__(self) -> None:
        self.steps = tuple(self.steps)
        where = f"skill {self.name!r}"
        if (
            not isinstance(self.name, str)
            or len(self.name) > MAX_NAME
            or not NAME_RE.match(self.name)
        ):
            raise UserError(
                f"{where}: name must be kebab-case (a-z, 0-9, '-') and <= {MAX_NAME} chars"
            )
        if not self.initiation.strip() or len(self.initiation) > MAX_DESCRIPTION:
            raise UserError(f"{where}: initiation/description must be 1..{MAX_DESCRIPTION} chars")
        if not MIN_STEPS <= len(self.steps) <= MAX_STEPS:
            raise UserError(
                f"{where}: has {len(self.steps)} steps; expected {MIN_STEPS}-{MAX_STEPS}"
            )
        for i, s in enumerate(self.steps):
            if not s.strip() or "\n" in s or s != s.strip():
                raise UserError(
                    f"{where}: step {i + 1} must be one non-empty stripped line; got {s!r}"
                )
        if "\n" in self.termination or not self.termination.strip():
            raise UserError(f"{where}: termination must be one non-empty line")

    @property
    def avg_gain(self) -> float:
        return self.total_gain / self.freq if self.freq > 0 else 0.0

    def text(self) -> str:
        """The skill as injected into the decision prompt."""
        steps = "\n".join(f"{i + 1}. {s}" for i, s in enumerate(self.steps))
        return (
            f"Skill: {self.name}\nUse when: {self.initiation}\nSteps:\n{steps}\n"
            f"Stop when: {self.termination}"
        )

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["steps"] = list(self.steps)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Skill:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def child(self, *, name=None, initiation=None, steps=None, termination=None) -> Skill:
        """A fresh-statistics edit of this skill (REFINE keeps the name and bumps the version)."""
        return Skill(
            name=name or self.name,
            initiation=initiation or self.initiation,
            steps=tuple(steps or self.steps),
            termination=termination or self.termination,
            version=self.version + 1 if (name or self.name) == self.name else 1,
            parent=f"{self.name}@v{self.version}",
        )


#: credit statistics kept in ``metadata`` (as strings) -> their Python type
_META_TYPES = {
    "freq": float,
    "total_gain": float,
    "maturity": int,
    "version": int,
    "parent": str,
    "born": int,
    "cooldown": int,
}
_STOP_HEADINGS = ("when to stop", "termination")
_STEP_HEADINGS = ("steps",)


def _meta_str(value) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def _escape(line: str) -> str:
    """A text line that could read as a heading (or an escape) gets a leading backslash."""
    return "\\" + line if line.startswith(("#", "\\")) else line


def _unescape(line: str) -> str:
    return line[1:] if line.startswith("\\") else line


def skill_md(skill: Skill) -> str:
    """The SKILL.md text of ``skill``: front matter (name, description = initiation, string
    metadata) and a body with the activation, the numbered steps and the termination."""
    import yaml

    d = skill.to_dict()
    meta = {k: _meta_str(d[k]) for k in _META_TYPES if d[k] is not None}
    front = {"name": skill.name, "description": skill.initiation, "metadata": meta}
    steps = "\n".join(f"{i + 1}. {s}" for i, s in enumerate(skill.steps))
    body = (
        f"# {skill.name}\n\n## When to use\n{_escape(skill.initiation)}\n\n## Steps\n{steps}\n\n"
        f"## When to stop\n{_escape(skill.termination)}\n"
    )
    return (
        "---\n"
        + yaml.safe_dump(front, sort_keys=False, allow_unicode=True, width=10**6)
        + "---\n"
        + body
    )


def _sections(body: str) -> tuple[list[str], dict[str, list[str]]]:
    """The body's lines before the first ``## `` heading, and each ``## `` section's lines."""
    pre: list[str] = []
    sections: dict[str, list[str]] = {}
    cur = pre
    for line in body.splitlines():
        if line.startswith("## "):
            cur = sections.setdefault(line[3:].strip().lower(), [])
        else:
            cur.append(line)
    return pre, sections


def _meta_value(key: str, raw, path) -> object:
    typ = _META_TYPES[key]
    if typ is str:
        return None if raw in (None, "", "None") else str(raw)
    try:
        return typ(str(raw))
    except ValueError:
        raise UserError(
            f"{path}: metadata.{key} must be {'an integer' if typ is int else 'a number'}; "
            f"got {raw!r}"
        ) from None


def parse_skill_md(text: str, path: str | Path = "<SKILL.md>", folder: str | None = None) -> Skill:
    """Parse SKILL.md text; ``folder`` (when given) must equal the front-matter name."""
    import yaml

    m = re.match(r"^---\n(.*?)\n---\n?(.*)\Z", text, re.S)
    if not m:
        raise UserError(f"{path}: expected YAML front matter between '---' lines")
    try:
        front = yaml.safe_load(m.group(1))
    except yaml.YAMLError as e:
        raise UserError(
            f"{path}: front matter is not valid YAML ({e.__class__.__name__})"
        ) from None
    if not isinstance(front, dict):
        raise UserError(f"{path}: front matter must be a mapping")
    for key in ("name", "description"):
        if not isinstance(front.get(key), str) or not front[key].strip():
            raise UserError(f"{path}: front matter field '{key}' is missing or empty")
    name = front["name"]
    if not NAME_RE.match(name) or len(name) > MAX_NAME:
        raise UserError(f"{path}: name {name!r} must be kebab-case and <= {MAX_NAME} chars")
    if folder is not None and name != folder:
        raise UserError(f"{path}: name {name!r} differs from its folder {folder!r}")
    meta = front.get("metadata") or {}
    if not isinstance(meta, dict):
        raise UserError(f"{path}: 'metadata' must be a mapping")
    pre, sections = _sections(m.group(2))
    step_lines = next((sections[h] for h in _STEP_HEADINGS if h in sections), None)
    if step_lines is None:  # numbered lines before any section (a minimal hand-written file)
        step_lines = [x for x in pre if not x.startswith("# ")]
    steps = []
    for line in step_lines:
        if not line.strip():
            continue
        sm = _STEP_RE.match(line)
        if sm is None:
            raise UserError(f"{path}: body line {line!r} is not a numbered step ('1. ...')")
        steps.append(sm.group(2))
    if not MIN_STEPS <= len(steps) <= MAX_STEPS:
        raise UserError(f"{path}: {len(steps)} steps; expected {MIN_STEPS}-{MAX_STEPS}")
    stop = next((sections[h] for h in _STOP_HEADINGS if h in sections), None)
    termination = " ".join(_unescape(x.strip()) for x in stop or () if x.strip())
    if not termination:
        hint = (
            " (metadata.termination is the old layout: move it into the body)"
            if "termination" in meta
            else ""
        )
        raise UserError(
            f"{path}: no '## When to stop' section with the termination condition{hint}; an "
            "agent reads only the body, so a skill must say there when it is done"
        )
    kw = {k: _meta_value(k, meta[k], path) for k in _META_TYPES if k in meta}
    try:
        return Skill(
            name=name, initiation=front["description"], steps=tuple(steps),
            termination=termination, **kw,
        )
    except (TypeError, ValueError) as e:
        raise UserError(f"{path}: {e}") from None


def generic_skills() -> list[Skill]:
    """The generic reasoning skills a fresh pool is seeded with (as in the paper's code)."""
    return [
        Skill(
            "structured-cot",
            "a decision needs several facts combined",
            (
                "List the facts the observation gives",
                "State what is still unknown",
                "Choose the action that resolves the most important unknown",
            ),
            "an action has been chosen",
        ),
        Skill(
            "react-decision",
            "an action must be taken from the current observation",
            (
                "Read the latest feedback",
                "Think about what it implies",
                "Act on the implication in the required answer format",
            ),
            "the feedback of the last action has been used",
        ),
        Skill(
            "hypothesis-elimination",
            "several hypotheses fit the observations so far",
            (
                "Enumerate the hypotheses",
                "Discard every hypothesis the feedback contradicts",
                "Test one of the remaining hypotheses",
            ),
            "one hypothesis remains",
        ),
    ]


@dataclass
class SkillPool:
    """A capped list of skills. ``cap``: the most skills kept (paper: 10)."""

    skills: list[Skill] = field(default_factory=list)
    cap: int = 10

    def __post_init__(self) -> None:
        if self.cap < 1:
            raise UserError(f"pool cap must be >= 1; got {self.cap}")
        names = [s.name for s in self.skills]
        if len(set(names)) != len(names):
            raise UserError(f"duplicate skill names in pool: {sorted(names)}")

    @classmethod
    def seeded(cls, cap: int = 10) -> SkillPool:
        return cls(generic_skills()[:cap], cap=cap)

    def __len__(self) -> int:
        return len(self.skills)

    def __iter__(self):
        return iter(self.skills)

    def get(self, name: str) -> Skill | None:
        return next((s for s in self.skills if s.name == name), None)

    def add(self, skill: Skill, *, replace: bool = True) -> None:
        old = self.get(skill.name)
        if old is not None:
            if not replace:
                raise UserError(f"skill {skill.name!r} already in pool")
            self.skills[self.skills.index(old)] = skill
        else:
            self.skills.append(skill)

    def remove(self, name: str) -> None:
        self.skills = [s for s in self.skills if s.name != name]

    def snapshot(self) -> list[dict]:
        return [s.to_dict() for s in self.skills]


def save_pool(pool: SkillPool, out: str | Path, *, force: bool = False) -> Path:
    """Write ``out/NAME/SKILL.md`` per skill and ``out/pool.json``; stale skill folders are removed.

    Over-cap pools are refused unless ``force``.
    """
    out = Path(out)
    if len(pool) > pool.cap and not force:
        raise UserError(
            f"pool has {len(pool)} skills, over its cap {pool.cap}; pass force=True (--force)"
        )
    out.mkdir(parents=True, exist_ok=True)
    keep = {s.name for s in pool}
    for d in out.iterdir():
        if d.is_dir() and (d / "SKILL.md").exists() and d.name not in keep:
            (d / "SKILL.md").unlink()
            if not any(d.iterdir()):
                d.rmdir()
    for s in pool:
        (out / s.name).mkdir(exist_ok=True)
        atomic_write_text(out / s.name / "SKILL.md", skill_md(s))
    atomic_write_json(out / "pool.json", {"cap": pool.cap, "skills": pool.snapshot()})
    return out


def load_pool(path: str | Path, *, cap: int | None = None, force: bool = False) -> SkillPool:
    """Load a pool from a folder of ``NAME/SKILL.md`` (``pool.json`` gives the cap when present)."""
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"pool folder {path} does not exist")
    meta_cap = 10
    if (path / "pool.json").exists():
        try:
            meta_cap = int(json.loads((path / "pool.json").read_text())["cap"])
        except (ValueError, KeyError, TypeError):
            raise UserError(
                f"{path / 'pool.json'}: expected a JSON object with an integer 'cap'"
            ) from None
    skills = [
        parse_skill_md(f.read_text(encoding="utf-8"), f, folder=f.parent.name)
        for f in sorted(path.glob("*/SKILL.md"))
    ]
    cap = cap or meta_cap
    if len(skills) > cap and not force:
        raise UserError(f"{path}: {len(skills)} skills, over the cap {cap}; pass --force")
    return SkillPool(skills, cap=max(cap, len(skills)))
