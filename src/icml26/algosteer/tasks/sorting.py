"""Sorting [paper: sorting]: built-in ``sorted``, quicksort, merge sort, heap sort, insertion,
selection and bubble sort."""

from __future__ import annotations

import ast

from icml26.algosteer.astq import Program
from icml26.algosteer.tasks.base import Case, Task

PROMPT = (
    "Write a Python function `sort_list(items)` that takes a list of integers and returns a new "
    "list with the same integers in ascending order."
)

HARNESS = """
def _big(n):
    return [(i * 2654435761) % 1000003 for i in range(n)]
"""

_INPUTS = (
    "[]",
    "[1]",
    "[2, 1]",
    "[3, 1, 2]",
    "[5, -1, 3, 3, 0, -7, 2]",
    "list(range(10, 0, -1))",
    "[4, 4, 4, 1, 1]",
    "[(i * 37) % 101 - 50 for i in range(60)]",
)


def adjacent_swap(p: Program) -> bool:
    """``a[j], a[j + 1] = a[j + 1], a[j]`` (or with ``j - 1``): neighbours swapped."""
    for node in p.nodes(ast.Assign):
        t = node.targets[0]
        if (
            isinstance(t, ast.Tuple)
            and len(t.elts) == 2
            and all(isinstance(e, ast.Subscript) for e in t.elts)
            and any(isinstance(x, ast.BinOp) for e in t.elts for x in ast.walk(e.slice))
        ):
            return True
    return False


def any_swap(p: Program) -> bool:
    for node in p.nodes(ast.Assign):
        t = node.targets[0]
        if (
            isinstance(t, ast.Tuple)
            and len(t.elts) == 2
            and all(isinstance(e, ast.Subscript) for e in t.elts)
        ):
            return True
    return False


def shifts(p: Program) -> bool:
    """``a[j + 1] = a[j]`` (insertion sort's shift), or ``insert`` into a result list."""
    for node in p.nodes(ast.Assign):
        t, v = node.targets[0], node.value
        if (
            isinstance(t, ast.Subscript)
            and isinstance(v, ast.Subscript)
            and dump_base(t) == dump_base(v)
        ):
            return True
    return bool(p.method_calls("insert")) or bool(p.calls("insort", "insort_left", "insort_right"))


def dump_base(node: ast.Subscript) -> str:
    return ast.dump(node.value)


def min_search(p: Program) -> bool:
    """Selection: a ``min(`` / ``index(min(`` call or a tracked minimum index in nested loops."""
    if p.calls("min", "max") and p.has_loop():
        return True
    for node in p.nodes(ast.Compare):
        if isinstance(node.ops[0], (ast.Lt, ast.Gt)) and isinstance(node.left, ast.Subscript):
            comp = node.comparators[0]
            if isinstance(comp, ast.Subscript) and isinstance(comp.slice, ast.Name):
                names = {n.id.lower() for n in ast.walk(comp.slice) if isinstance(n, ast.Name)}
                if any("min" in n or "max" in n or "small" in n or "large" in n for n in names):
                    return True
    return False


def halving_split(p: Program) -> bool:
    for node in p.nodes(ast.BinOp):
        if (
            isinstance(node.op, (ast.FloorDiv, ast.RShift))
            and isinstance(node.right, ast.Constant)
            and node.right.value in (1, 2)
        ):
            return True
    return False


def rules(p: Program) -> tuple[str, str] | None:
    if p.calls("heappush", "heappop", "heapify", "nsmallest") or "heapq" in p.imports():
        return "heapsort", "heapq"
    rec = p.recursive_functions()
    if rec:
        if (
            halving_split(p)
            and not p.calls("sorted")
            and not any(isinstance(g, ast.comprehension) for g in p.nodes(ast.comprehension))
        ):
            return "mergesort", "recursion on halves + merge"
        if halving_split(p) and p.method_calls("extend", "append") and p.has_while():
            return "mergesort", "recursion on halves + merge loop"
        if halving_split(p) and "sift" in " ".join(p.function_names).lower():
            return "heapsort", "recursive sift-down"
        return "quicksort", "recursion around a pivot"
    if p.calls("sorted") or p.method_calls("sort"):
        return "builtin", "sorted()/list.sort"
    if p.loop_depth() >= 2:
        if adjacent_swap(p) and not min_search(p):
            return "bubble", "adjacent swaps in nested loops"
        if shifts(p) and p.has_while():
            return "insertion", "shift larger items right"
        if min_search(p) or any_swap(p):
            return "selection", "find the minimum of the rest, swap"
        if shifts(p):
            return "insertion", "shift larger items right"
    if p.calls("insort", "insort_left", "insort_right"):
        return "insertion", "bisect.insort"
    return None


REFERENCES = {
    "builtin": (
        "def sort_list(items):\n    return sorted(items)\n",
        "def sort_list(items):\n    out = list(items)\n    out.sort()\n    return out\n",
    ),
    "quicksort": (
        "def sort_list(items):\n    if len(items) <= 1:\n        return list(items)\n"
        "    pivot = items[len(items) // 2]\n"
        "    return (sort_list([x for x in items if x < pivot]) + [x for x in items if x == pivot]\n"
        "            + sort_list([x for x in items if x > pivot]))\n",
    ),
    "mergesort": (
        "def sort_list(items):\n    if len(items) <= 1:\n        return list(items)\n"
        "    mid = len(items) // 2\n    left, right = sort_list(items[:mid]), sort_list(items[mid:])\n"
        "    out, i, j = [], 0, 0\n    while i < len(left) and j < len(right):\n"
        "        if left[i] <= right[j]:\n            out.append(left[i])\n            i += 1\n"
        "        else:\n            out.append(right[j])\n            j += 1\n"
        "    out.extend(left[i:])\n    out.extend(right[j:])\n    return out\n",
    ),
    "heapsort": (
        "import heapq\n\ndef sort_list(items):\n    heap = list(items)\n    heapq.heapify(heap)\n"
        "    return [heapq.heappop(heap) for _ in range(len(heap))]\n",
    ),
    "insertion": (
        "def sort_list(items):\n    a = list(items)\n    for i in range(1, len(a)):\n"
        "        key = a[i]\n        j = i - 1\n        while j >= 0 and a[j] > key:\n"
        "            a[j + 1] = a[j]\n            j -= 1\n        a[j + 1] = key\n    return a\n",
    ),
    "selection": (
        "def sort_list(items):\n    a = list(items)\n    for i in range(len(a)):\n"
        "        smallest = i\n        for j in range(i + 1, len(a)):\n"
        "            if a[j] < a[smallest]:\n                smallest = j\n"
        "        a[i], a[smallest] = a[smallest], a[i]\n    return a\n",
    ),
    "bubble": (
        "def sort_list(items):\n    a = list(items)\n    n = len(a)\n    for i in range(n):\n"
        "        for j in range(n - 1 - i):\n            if a[j] > a[j + 1]:\n"
        "                a[j], a[j + 1] = a[j + 1], a[j]\n    return a\n",
    ),
}

TASK = Task(
    name="sorting",
    title="Sort a list",
    prompt=PROMPT,
    entry="sort_list",
    harness=HARNESS,
    functional=tuple(Case(f"sort_list({x})", f"sorted({x})") for x in _INPUTS),
    large=(Case("sort_list(_big(200000))", "sorted(_big(200000))"),),
    families=("builtin", "quicksort", "mergesort", "heapsort", "insertion", "selection", "bubble"),
    rules=rules,
    references=REFERENCES,
    named=("mergesort", "merge sort"),
    source="paper",
)
