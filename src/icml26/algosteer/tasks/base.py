"""The task contract: a prompt, an entry point, tests, and algorithm families with AST rules."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from icml26.algosteer.astq import Program

__all__ = ["Case", "Task"]


@dataclass(frozen=True)
class Case:
    """One test: ``expr`` is evaluated in the program's namespace (after the task's harness), and
    must equal ``expected`` (evaluated there too, so it may call the harness's reference)."""

    expr: str
    expected: str


@dataclass(frozen=True)
class Task:
    """A coding task with several correct algorithm families.

    ``prompt``: the task text the model sees (cues are added around it). ``entry``: the function or
    class the tests call; ``alias_entry``: when the program defines no ``entry`` but exactly one
    public function (class, if ``entry_is_class``), the tests call that one instead (small models
    rename functions; the algorithm is what is measured). ``harness``: stdlib Python run after the
    program (helpers such as ``TreeNode`` and references). ``functional``: the gate; ``large``:
    large inputs whose timeouts are a family property, recorded apart. ``families``: the labels
    :attr:`rules` can return, besides ``other`` and ``unparsable``. ``rules(program)`` returns
    ``(family, evidence)`` or ``None`` for ``other``. ``references``: family -> correct programs
    (each must be labelled with its family and pass the functional tests). ``named``:
    ``(family, phrase)`` for the naming cue ("Use {phrase}.").
    """

    name: str
    title: str
    prompt: str
    entry: str
    harness: str
    functional: tuple[Case, ...]
    large: tuple[Case, ...]
    families: tuple[str, ...]
    rules: Callable[[Program], tuple[str, str] | None] = field(repr=False)
    references: dict[str, tuple[str, ...]] = field(repr=False)
    named: tuple[str, str]
    entry_is_class: bool = False
    alias_entry: bool = True
    source: str = "ours"  # "paper" when the paper names the task and its families

    def __post_init__(self) -> None:
        if not self.functional:
            raise ValueError(f"task {self.name!r}: `functional` needs at least one Case")
        unknown = set(self.references) - set(self.families)
        if unknown:
            raise ValueError(f"task {self.name!r}: references for unknown families {unknown}")
        if self.named[0] not in self.families:
            raise ValueError(f"task {self.name!r}: named family {self.named[0]!r} not in families")
        if sum(len(v) for v in self.references.values()) < 3:
            raise ValueError(f"task {self.name!r}: needs >= 3 reference programs")
