"""Label a generated program with its algorithm family from the syntax tree.

``extract_code(text, entry)`` takes the program out of a model reply (markdown fences, or the raw
text when it parses); ``classify(code, task)`` returns ``(family, evidence)`` where family is one
of ``task.families``, ``"other"`` (parses, no rule matched) or ``"unparsable"``.
"""

from __future__ import annotations

import re

from icml26.algosteer.astq import parse_program
from icml26.algosteer.tasks import Task

__all__ = ["extract_code", "classify", "label_reply"]

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)


def extract_code(text: str, entry: str | None = None) -> str:
    """The program in a reply.

    Fenced blocks (```python ... ```; an unclosed last fence runs to the end of the text) are
    candidates; the first that defines ``entry`` and parses wins, else the first that parses, else
    the first block. Without fences, the whole text if it parses, else the longest prefix of lines
    that parses (a reply cut off by the token limit), else ``""``.
    """
    blocks = [m.group(2) for m in _FENCE.finditer(text)]
    if blocks:
        parsed = [b for b in blocks if parse_program(b) is not None]
        if entry:
            pat = re.compile(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(entry)}\b", re.M)
            for b in parsed:
                if pat.search(b):
                    return b.strip("\n") + "\n"
        if parsed:
            return parsed[0].strip("\n") + "\n"
        return _longest_parsable_prefix(blocks[0])
    return _longest_parsable_prefix(text)


def _longest_parsable_prefix(text: str) -> str:
    lines = text.splitlines()
    for end in range(len(lines), 0, -1):
        chunk = "\n".join(lines[:end]).strip("\n")
        if chunk and parse_program(chunk) is not None and _has_def(chunk):
            return chunk + "\n"
    return ""


def _has_def(code: str) -> bool:
    return bool(re.search(r"^\s*(def|class)\s+\w+", code, re.M))


def classify(code: str, task: Task) -> tuple[str, str]:
    """``(family, evidence)`` for ``code`` (a program, not a reply) under ``task``'s rules."""
    program = parse_program(code) if code.strip() else None
    if program is None:
        return "unparsable", "empty" if not code.strip() else "syntax error"
    try:
        hit = task.rules(program)
    except RecursionError:  # absurdly deep trees
        return "unparsable", "tree too deep"
    if hit is None:
        return "other", "no family rule matched"
    family, evidence = hit
    assert family in task.families, (family, task.name)
    return family, evidence


def label_reply(text: str, task: Task) -> tuple[str, str, str]:
    """``(code, family, evidence)`` for a raw model reply."""
    code = extract_code(text, task.entry)
    family, evidence = classify(code, task)
    return code, family, evidence
