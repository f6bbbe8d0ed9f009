"""Memoization [paper: memoization; the task text is ours]: counting the ways to make an amount
from coins -- naive recursion, memoized recursion, bottom-up table."""

from __future__ import annotations

import ast

from icml26.algosteer.astq import Program
from icml26.algosteer.tasks.base import Case, Task

PROMPT = (
    "Write a Python function `count_ways(amount, coins)` that returns the number of different "
    "ways to make `amount` as a sum of coins from the list `coins` (distinct positive integers; "
    "each coin may be used any number of times; the order of coins does not matter). "
    "count_ways(0, coins) is 1."
)

HARNESS = """
def _ways_ref(amount, coins):
    table = [1] + [0] * amount
    for c in coins:
        for a in range(c, amount + 1):
            table[a] += table[a - c]
    return table[amount]
"""

_CASES = (
    (0, "[1, 2]"),
    (1, "[2]"),
    (4, "[1, 2, 3]"),
    (5, "[1, 2, 5]"),
    (3, "[2]"),
    (10, "[10]"),
    (12, "[2, 5, 3, 6]"),
    (30, "[1, 5, 10, 25]"),
)


def subscript_roots(p: Program) -> set[str]:
    """Names ``t`` stored into as ``t[i] = ...``, ``t[i][j] = ...`` or ``t[i] += ...``."""
    out = set()
    for node in p.nodes(ast.Assign, ast.AugAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            if not isinstance(t, ast.Subscript):
                continue
            while isinstance(t, ast.Subscript):
                t = t.value
            if isinstance(t, ast.Name):
                out.add(t.id)
    return out


def rules(p: Program) -> tuple[str, str] | None:
    rec = p.recursive_functions()
    if p.decorated_with("lru_cache", "cache", "memoize", "memoized"):
        return "memoized", "cache decorator"
    caches = p.subscript_store_names() | (p.dict_like_names() & p.membership_tested())
    if rec and caches:
        return "memoized", f"recursion + cache {sorted(caches)[0]!r}"
    if rec:
        return "naive", f"self-call {sorted(rec)[0]!r}"
    table = subscript_roots(p)
    if p.has_loop() and table:
        return "bottom_up", f"table {sorted(table)[0]!r} filled in loops"
    return None


REFERENCES = {
    "naive": (
        "def count_ways(amount, coins):\n    def go(rest, i):\n        if rest == 0:\n"
        "            return 1\n        if rest < 0 or i == len(coins):\n            return 0\n"
        "        return go(rest - coins[i], i) + go(rest, i + 1)\n    return go(amount, 0)\n",
    ),
    "memoized": (
        "from functools import lru_cache\n\ndef count_ways(amount, coins):\n"
        "    @lru_cache(maxsize=None)\n    def go(rest, i):\n        if rest == 0:\n"
        "            return 1\n        if rest < 0 or i == len(coins):\n            return 0\n"
        "        return go(rest - coins[i], i) + go(rest, i + 1)\n    return go(amount, 0)\n",
        "def count_ways(amount, coins, memo=None):\n    memo = {} if memo is None else memo\n"
        "    def go(rest, i):\n        if rest == 0:\n            return 1\n"
        "        if rest < 0 or i == len(coins):\n            return 0\n"
        "        if (rest, i) not in memo:\n"
        "            memo[(rest, i)] = go(rest - coins[i], i) + go(rest, i + 1)\n"
        "        return memo[(rest, i)]\n    return go(amount, 0)\n",
    ),
    "bottom_up": (
        "def count_ways(amount, coins):\n    ways = [1] + [0] * amount\n    for c in coins:\n"
        "        for a in range(c, amount + 1):\n            ways[a] += ways[a - c]\n"
        "    return ways[amount]\n",
        "def count_ways(amount, coins):\n    n = len(coins)\n"
        "    t = [[0] * (amount + 1) for _ in range(n + 1)]\n    for i in range(n + 1):\n"
        "        t[i][0] = 1\n    for i in range(1, n + 1):\n        for a in range(1, amount + 1):\n"
        "            t[i][a] = t[i - 1][a] + (t[i][a - coins[i - 1]] if a >= coins[i - 1] else 0)\n"
        "    return t[n][amount]\n",
    ),
}

TASK = Task(
    name="memo",
    title="Count coin-change ways",
    prompt=PROMPT,
    entry="count_ways",
    harness=HARNESS,
    functional=tuple(Case(f"count_ways({a}, {c})", f"_ways_ref({a}, {c})") for a, c in _CASES),
    large=(
        Case(
            "count_ways(300, [1, 2, 5, 10, 20, 50, 100, 200])",
            "_ways_ref(300, [1, 2, 5, 10, 20, 50, 100, 200])",
        ),
    ),
    families=("naive", "memoized", "bottom_up"),
    rules=rules,
    references=REFERENCES,
    named=("bottom_up", "a bottom-up dynamic-programming table"),
    source="paper",
)
