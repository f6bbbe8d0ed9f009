"""Deduplication [paper: dedup]: hash set, ``dict.fromkeys``, sort-and-scan, nested loops."""

from __future__ import annotations

import ast

from icml26.algosteer.astq import Program
from icml26.algosteer.tasks.base import Case, Task

PROMPT = (
    "Write a Python function `dedup(items)` that takes a list of integers and returns a list "
    "containing each distinct value exactly once (the order of the result does not matter)."
)

HARNESS = """
def _same(result, items):
    result = list(result)
    return len(result) == len(set(items)) and sorted(result) == sorted(set(items))

def _big(n):
    # n integers with ~n/2 distinct values, deterministic
    return [(i * 7919) % (n // 2) for i in range(n)]
"""

_INPUTS = (
    "[]",
    "[1]",
    "[3, 1, 3, 2, 1]",
    "[5, 5, 5, 5]",
    "[-1, 0, -1, 2, 0, 9]",
    "list(range(20)) * 2",
)


def rules(p: Program) -> tuple[str, str] | None:
    if p.calls_dotted("dict.fromkeys", "OrderedDict.fromkeys", "collections.OrderedDict.fromkeys"):
        return "dict_fromkeys", "dict.fromkeys"
    if p.calls("set", "frozenset") or any(True for _ in p.nodes(ast.Set, ast.SetComp)):
        return "set", "set()"
    if p.calls("Counter", "defaultdict") or p.dict_like_names() & (
        p.subscript_store_names() | p.membership_tested()
    ):
        return "dict_fromkeys", "dict keyed by item"
    if p.calls("sorted") or p.method_calls("sort"):
        return "sort_scan", "sort then compare neighbours"
    if p.membership_tested() and p.has_loop():
        return "nested_loops", "linear membership scan inside a loop"
    if p.method_calls("count", "index") and p.has_loop():
        return "nested_loops", "list.count/index inside a loop"
    equal = any(isinstance(op, ast.Eq) for c in p.nodes(ast.Compare) for op in c.ops)
    if p.loop_depth() >= 2 and equal:
        return "nested_loops", "pairwise comparison in nested loops"
    return None


REFERENCES = {
    "set": (
        "def dedup(items):\n    return list(set(items))\n",
        "def dedup(items):\n    seen = set()\n    out = []\n    for x in items:\n"
        "        if x not in seen:\n            seen.add(x)\n            out.append(x)\n    return out\n",
    ),
    "dict_fromkeys": ("def dedup(items):\n    return list(dict.fromkeys(items))\n",),
    "sort_scan": (
        "def dedup(items):\n    out = []\n    for x in sorted(items):\n"
        "        if not out or out[-1] != x:\n            out.append(x)\n    return out\n",
    ),
    "nested_loops": (
        "def dedup(items):\n    out = []\n    for x in items:\n        if x not in out:\n"
        "            out.append(x)\n    return out\n",
        "def dedup(items):\n    out = []\n    for i in range(len(items)):\n        dup = False\n"
        "        for j in range(i):\n            if items[j] == items[i]:\n                dup = True\n"
        "        if not dup:\n            out.append(items[i])\n    return out\n",
    ),
}

TASK = Task(
    name="dedup",
    title="Deduplicate a list",
    prompt=PROMPT,
    entry="dedup",
    harness=HARNESS,
    functional=tuple(Case(f"_same(dedup({x}), {x})", "True") for x in _INPUTS),
    large=(Case("_same(dedup(_big(200000)), _big(200000))", "True"),),
    families=("set", "dict_fromkeys", "sort_scan", "nested_loops"),
    rules=rules,
    references=REFERENCES,
    named=("set", "a hash set of the values seen so far"),
    source="paper",
)
