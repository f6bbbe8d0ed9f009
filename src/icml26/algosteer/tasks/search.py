"""Sorted search [paper: sorted search]: ``bisect``, iterative binary search, recursive binary
search, linear scan."""

from __future__ import annotations

import ast

from icml26.algosteer.astq import Program
from icml26.algosteer.tasks.base import Case, Task

PROMPT = (
    "Write a Python function `search(items, target)` that returns the index of `target` in the "
    "list `items`, which holds distinct integers sorted in ascending order, or -1 if `target` "
    "is not in it."
)

HARNESS = """
def _big_ok(n=100000, queries=20000):
    items = list(range(0, 2 * n, 2))
    step = max(1, (2 * n) // queries)
    for q in range(0, 2 * n, step):
        want = q // 2 if q % 2 == 0 else -1
        if search(items, q) != want:
            return False
    return True
"""

_CASES = (
    ("[]", 5, -1),
    ("[5]", 5, 0),
    ("[5]", 4, -1),
    ("[1, 3, 5, 7, 9]", 1, 0),
    ("[1, 3, 5, 7, 9]", 9, 4),
    ("[1, 3, 5, 7, 9]", 7, 3),
    ("[1, 3, 5, 7, 9]", 4, -1),
    ("[1, 3, 5, 7, 9]", 10, -1),
    ("[-10, -3, 0, 2, 8, 11]", -3, 1),
    ("list(range(0, 200, 2))", 138, 69),
    ("list(range(0, 200, 2))", 139, -1),
)


def midpoint(p: Program) -> bool:
    """``(lo + hi) // 2``, ``lo + (hi - lo) // 2`` or ``>> 1``: a midpoint."""
    for node in p.nodes(ast.BinOp):
        if not isinstance(node.right, ast.Constant):
            continue
        if (isinstance(node.op, ast.FloorDiv) and node.right.value == 2) or (
            isinstance(node.op, ast.RShift) and node.right.value == 1
        ):
            return True
    for call in p.calls("int"):
        if (
            call.args
            and isinstance(call.args[0], ast.BinOp)
            and isinstance(call.args[0].op, ast.Div)
        ):
            return True
    return False


def rules(p: Program) -> tuple[str, str] | None:
    if p.calls("bisect", "bisect_left", "bisect_right") or "bisect" in p.imports():
        return "bisect", "bisect module"
    if midpoint(p):
        rec = p.recursive_functions()
        if rec:
            return "binary_recursive", f"midpoint + self-call {sorted(rec)[0]!r}"
        if p.has_loop():
            return "binary_iterative", "midpoint in a loop"
    if p.method_calls("index") or p.has_loop():
        return "linear", "scan (loop or list.index)"
    if any(isinstance(op, ast.In) for c in p.nodes(ast.Compare) for op in c.ops):
        return "linear", "membership test"
    return None


REFERENCES = {
    "bisect": (
        "from bisect import bisect_left\n\ndef search(items, target):\n"
        "    i = bisect_left(items, target)\n"
        "    return i if i < len(items) and items[i] == target else -1\n",
    ),
    "binary_iterative": (
        "def search(items, target):\n    lo, hi = 0, len(items) - 1\n    while lo <= hi:\n"
        "        mid = (lo + hi) // 2\n        if items[mid] == target:\n            return mid\n"
        "        if items[mid] < target:\n            lo = mid + 1\n        else:\n"
        "            hi = mid - 1\n    return -1\n",
    ),
    "binary_recursive": (
        "def search(items, target, lo=0, hi=None):\n    if hi is None:\n        hi = len(items) - 1\n"
        "    if lo > hi:\n        return -1\n    mid = lo + (hi - lo) // 2\n"
        "    if items[mid] == target:\n        return mid\n    if items[mid] < target:\n"
        "        return search(items, target, mid + 1, hi)\n    return search(items, target, lo, mid - 1)\n",
    ),
    "linear": (
        "def search(items, target):\n    for i, x in enumerate(items):\n        if x == target:\n"
        "            return i\n    return -1\n",
        "def search(items, target):\n    return items.index(target) if target in items else -1\n",
    ),
}

TASK = Task(
    name="search",
    title="Search a sorted list",
    prompt=PROMPT,
    entry="search",
    harness=HARNESS,
    functional=tuple(Case(f"search({xs}, {t})", str(w)) for xs, t, w in _CASES),
    large=(Case("_big_ok()", "True"),),
    families=("bisect", "binary_iterative", "binary_recursive", "linear"),
    rules=rules,
    references=REFERENCES,
    named=("binary_iterative", "an iterative binary search (a while loop over lo/hi)"),
    source="paper",
)
