"""The tasks: each a prompt, tests and algorithm families with AST rules.

All eleven of the paper's tasks: Fibonacci, tree traversal, rate limiter, parsing, sorting,
sorted search, memoization, LRU cache, dedup, primes, shortest path (docs/algosteer.md lists
each task's families and rules, and which parts are the paper's).
"""

from __future__ import annotations

import difflib

from icml26.algosteer.tasks.base import Case, Task
from icml26.algosteer.tasks.dedup import TASK as DEDUP
from icml26.algosteer.tasks.fib import TASK as FIB
from icml26.algosteer.tasks.lru import TASK as LRU
from icml26.algosteer.tasks.memo import TASK as MEMO
from icml26.algosteer.tasks.parsing import TASK as PARSING
from icml26.algosteer.tasks.primes import TASK as PRIMES
from icml26.algosteer.tasks.ratelimit import TASK as RATELIMIT
from icml26.algosteer.tasks.search import TASK as SEARCH
from icml26.algosteer.tasks.shortest import TASK as SHORTEST
from icml26.algosteer.tasks.sorting import TASK as SORTING
from icml26.algosteer.tasks.tree import TASK as TREE
from icml26.core.errors import UserError

__all__ = ["Case", "Task", "TASKS", "get_task"]

TASKS: dict[str, Task] = {
    t.name: t
    for t in (FIB, TREE, DEDUP, RATELIMIT, PARSING, SORTING, SEARCH, MEMO, LRU, PRIMES, SHORTEST)
}


def get_task(name: str) -> Task:
    """The task called ``name``; a :class:`UserError` listing near names otherwise."""
    try:
        return TASKS[name]
    except KeyError:
        near = difflib.get_close_matches(name, TASKS, n=3, cutoff=0.4)
        hint = f" (did you mean {', '.join(near)}?)" if near else ""
        raise UserError(f"unknown task {name!r}{hint}; known tasks: {', '.join(TASKS)}") from None
