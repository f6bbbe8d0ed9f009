"""The tasks: each a prompt, tests and algorithm families with AST rules.

Fibonacci, tree traversal and deduplication are implemented (the paper's tasks; the `small`
claim uses them). The paper's other eight (rate limiter, parsing, sorting, sorted search,
memoization, LRU cache, primes, shortest path) are not implemented yet: see docs/algosteer.md.
"""

from __future__ import annotations

import difflib

from icml26.algosteer.tasks.base import Case, Task
from icml26.algosteer.tasks.dedup import TASK as DEDUP
from icml26.algosteer.tasks.fib import TASK as FIB
from icml26.algosteer.tasks.tree import TASK as TREE
from icml26.core.errors import UserError

__all__ = ["Case", "Task", "TASKS", "get_task"]

TASKS: dict[str, Task] = {t.name: t for t in (FIB, TREE, DEDUP)}


def get_task(name: str) -> Task:
    """The task called ``name``; a :class:`UserError` listing near names otherwise."""
    try:
        return TASKS[name]
    except KeyError:
        near = difflib.get_close_matches(name, TASKS, n=3, cutoff=0.4)
        hint = f" (did you mean {', '.join(near)}?)" if near else ""
        raise UserError(f"unknown task {name!r}{hint}; known tasks: {', '.join(TASKS)}") from None
