"""Cues: incidental context placed around a task prompt, and the chat messages they make.

A :class:`Cue` has an ``id``, a ``channel`` (where in a real workflow such text comes from), a
``category`` -- ``control`` (no cue; ``none_resampled`` is the same prompt sampled again with other
seeds, the noise floor), ``semantic`` (says something about what the code should optimise),
``innocuous`` (irrelevant to the algorithm), ``surface`` (the memoization ablation: the semantic
cue's meaning in other typography) or ``naming`` (names the algorithm) -- a ``text`` and a
``place``: ``system`` (system message), ``before`` or ``after`` the task in the user message.

The paper's exact cue strings are not published; channels and categories follow the paper
(18 channels + the memoize semantic/surface ablation), the texts are ours (docs/algosteer.md).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from icml26.algosteer.tasks import Task
from icml26.core.errors import UserError

__all__ = ["Cue", "CUES", "CATEGORIES", "get_cue", "build_messages", "FORMAT_INSTRUCTION"]

CATEGORIES = ("control", "semantic", "innocuous", "surface", "naming")
PLACES = ("system", "before", "after", "none")
FORMAT_INSTRUCTION = "Reply with only the code, in one ```python block."


@dataclass(frozen=True)
class Cue:
    id: str
    channel: str
    category: str
    text: str
    place: str

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(
                f"cue {self.id!r}: category must be one of {CATEGORIES}; got {self.category!r}"
            )
        if self.place not in PLACES:
            raise ValueError(f"cue {self.id!r}: place must be one of {PLACES}; got {self.place!r}")


_C = Cue
CUES: dict[str, Cue] = {
    c.id: c
    for c in (
        _C("none", "control", "control", "", "none"),
        _C("none_resampled", "control", "control", "", "none"),
        # 18 channels
        _C(
            "persona",
            "persona",
            "semantic",
            "You are a senior performance engineer; every microsecond counts.",
            "system",
        ),
        _C(
            "team_name", "team name", "innocuous", "Team Falcon - sprint 14 backlog item.", "before"
        ),
        _C("file_path", "file path", "innocuous", "File: src/utils/helpers.py", "before"),
        _C(
            "surrounding_code",
            "surrounding code",
            "innocuous",
            "Existing code in this file:\n```python\nimport logging\n\nlog = logging.getLogger(__name__)\n```",
            "before",
        ),
        _C(
            "comment",
            "code comment",
            "semantic",
            "A comment above the stub says: # TODO: this is called in a hot loop.",
            "before",
        ),
        _C(
            "performance",
            "speed demand",
            "semantic",
            "This code is performance-critical: it runs on very large inputs millions of times.",
            "after",
        ),
        _C(
            "readability",
            "readability demand",
            "semantic",
            "Optimise for readability: junior developers must understand it at a glance.",
            "after",
        ),
        _C(
            "memory",
            "memory demand",
            "semantic",
            "It runs on a memory-constrained embedded target with a tiny stack.",
            "after",
        ),
        _C(
            "security",
            "security demand",
            "semantic",
            "It must be robust against malicious or very large inputs.",
            "after",
        ),
        _C(
            "prototype",
            "prototype",
            "semantic",
            "This is a quick throwaway prototype for a demo.",
            "after",
        ),
        _C(
            "ticket",
            "ticket metadata",
            "innocuous",
            "Ticket: PROJ-4821 | Priority: P3 | Reporter: j.doe | Component: core",
            "before",
        ),
        _C(
            "teaching",
            "audience",
            "semantic",
            "This is for a textbook chapter that teaches recursion.",
            "after",
        ),
        _C("style_guide", "style guide", "innocuous", "Follow PEP 8 naming.", "after"),
        _C(
            "project_name",
            "project name",
            "innocuous",
            "Project: Nebula Analytics Platform",
            "before",
        ),
        _C(
            "environment",
            "environment",
            "innocuous",
            "Environment: Python 3.11 on Linux.",
            "before",
        ),
        _C("timestamp", "timestamp", "innocuous", "Date: 2024-03-14 09:26", "before"),
        _C(
            "paradigm",
            "codebase paradigm",
            "semantic",
            "Our codebase follows a functional programming style.",
            "before",
        ),
        _C(
            "interview",
            "interview",
            "semantic",
            "This is for a coding interview at a large tech company.",
            "before",
        ),
        # the memoization ablation: same meaning, other typography
        _C(
            "memo_semantic",
            "memoization ablation",
            "semantic",
            "Memoize results where it helps.",
            "after",
        ),
        _C(
            "memo_surface",
            "memoization ablation",
            "surface",
            "MEMO-ize results where it helps!!",
            "after",
        ),
        # naming (mitigation): text filled from the task's named family
        _C("naming", "algorithm naming", "naming", "Use {named}.", "after"),
    )
}


def get_cue(cue_id: str) -> Cue:
    """The cue ``cue_id``; a :class:`UserError` listing near names otherwise."""
    try:
        return CUES[cue_id]
    except KeyError:
        near = difflib.get_close_matches(cue_id, CUES, n=3, cutoff=0.4)
        hint = f" (did you mean {', '.join(near)}?)" if near else ""
        raise UserError(f"unknown cue {cue_id!r}{hint}; known cues: {', '.join(CUES)}") from None


def cue_text(cue: Cue, task: Task) -> str:
    return cue.text.replace("{named}", task.named[1])


def build_messages(task: Task, cue: Cue) -> list[dict[str, str]]:
    """Chat messages for ``task`` under ``cue``: an optional system message, then one user
    message ``[before]\\n\\n<task prompt>\\n<format instruction>[\\n\\nafter]``."""
    text = cue_text(cue, task)
    user = f"{task.prompt}\n{FORMAT_INSTRUCTION}"
    if cue.place == "before":
        user = f"{text}\n\n{user}"
    elif cue.place == "after":
        user = f"{user}\n\n{text}"
    messages = [{"role": "user", "content": user}]
    if cue.place == "system":
        messages.insert(0, {"role": "system", "content": text})
    return messages
