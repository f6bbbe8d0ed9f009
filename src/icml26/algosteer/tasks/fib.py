"""Fibonacci [paper]: naive recursion, memoized recursion, iteration, matrix power, closed form."""

from __future__ import annotations

import ast

from icml26.algosteer.astq import Program
from icml26.algosteer.tasks.base import Case, Task

PROMPT = (
    "Write a Python function `fib(n)` that returns the n-th Fibonacci number, with fib(0) = 0 and "
    "fib(1) = 1, for integers n >= 0."
)

HARNESS = """
def _fib_ref(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a
"""


def halving(p: Program) -> list[str]:
    """Evidence of exponentiation by squaring / halving: ``n // 2``, ``n >> 1``, ``n % 2``,
    ``n & 1``, ``pow(M, n)`` on non-scalars is not detectable, so only these shapes count."""
    found = []
    for node in p.nodes(ast.BinOp, ast.AugAssign):
        op, right = node.op, node.right if isinstance(node, ast.BinOp) else node.value
        if not isinstance(right, ast.Constant):
            continue
        if isinstance(op, (ast.FloorDiv, ast.Mod)) and right.value == 2:
            found.append(f"{type(op).__name__} 2")
        elif isinstance(op, (ast.RShift, ast.BitAnd)) and right.value == 1:
            found.append(f"{type(op).__name__} 1")
    return found


def matrix_literals(p: Program) -> int:
    """2x2 literals ``[[a, b], [c, d]]`` (lists or tuples)."""
    seq = (ast.List, ast.Tuple)
    return sum(
        1
        for n in p.nodes(*seq)
        if len(n.elts) == 2 and all(isinstance(e, seq) and len(e.elts) == 2 for e in n.elts)
    )


def closed_form(p: Program) -> str | None:
    names = {x.lower() for x in p.names()}
    if names & {"phi", "golden", "golden_ratio", "psi"}:
        return "golden-ratio name"
    nums = p.numbers()
    if any(abs(v - 1.6180339887) < 1e-3 or abs(v - 2.2360679775) < 1e-3 for v in nums):
        return "phi / sqrt(5) constant"
    for call in p.calls("sqrt"):
        if call.args and isinstance(call.args[0], ast.Constant) and call.args[0].value == 5:
            return "sqrt(5)"
    for node in p.nodes(ast.BinOp):
        if (
            isinstance(node.op, ast.Pow)
            and isinstance(node.left, ast.Constant)
            and node.left.value == 5
            and isinstance(node.right, ast.Constant)
            and node.right.value == 0.5
        ):
            return "5 ** 0.5"
    return None


def rules(p: Program) -> tuple[str, str] | None:
    why = closed_form(p)
    if why:
        return "closed_form", why
    rec = p.recursive_functions()
    halves = halving(p)
    if matrix_literals(p) and (halves or rec or p.calls("pow", "matrix_power")):
        return "matrix", f"2x2 literal + {', '.join(halves[:2]) or 'power'}"
    if p.decorated_with("lru_cache", "cache", "memoize", "memoized"):
        return "memoized", "cache decorator"
    caches = p.subscript_store_names() | (p.dict_like_names() & p.membership_tested())
    if rec and caches:
        return "memoized", f"recursion + cache {sorted(caches)[0]!r}"
    if rec and halves:
        return "matrix", "fast doubling (recursion on n/2)"
    if rec:
        return "naive", f"self-call {sorted(rec)[0]!r}"
    if p.has_loop():
        if p.tuple_swaps():
            return "iterative", "loop + rolling pair"
        return "iterative", "loop (table or rolling variables)"
    return None


REFERENCES = {
    "naive": (
        "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    ),
    "memoized": (
        "from functools import lru_cache\n\n@lru_cache(maxsize=None)\ndef fib(n):\n"
        "    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
        "def fib(n, memo={}):\n    if n < 2:\n        return n\n    if n not in memo:\n"
        "        memo[n] = fib(n - 1, memo) + fib(n - 2, memo)\n    return memo[n]\n",
    ),
    "iterative": (
        "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
        "def fib(n):\n    table = [0, 1]\n    for i in range(2, n + 1):\n"
        "        table.append(table[i - 1] + table[i - 2])\n    return table[n]\n",
    ),
    "matrix": (
        "def mul(x, y):\n    return [[x[0][0]*y[0][0] + x[0][1]*y[1][0], x[0][0]*y[0][1] + x[0][1]*y[1][1]],\n"
        "            [x[1][0]*y[0][0] + x[1][1]*y[1][0], x[1][0]*y[0][1] + x[1][1]*y[1][1]]]\n\n"
        "def fib(n):\n    result = [[1, 0], [0, 1]]\n    base = [[1, 1], [1, 0]]\n    while n:\n"
        "        if n & 1:\n            result = mul(result, base)\n        base = mul(base, base)\n"
        "        n >>= 1\n    return result[0][1]\n",
        "def fib(n):\n    def pair(k):\n        if k == 0:\n            return 0, 1\n"
        "        a, b = pair(k // 2)\n        c = a * (2 * b - a)\n        d = a * a + b * b\n"
        "        return (d, c + d) if k % 2 else (c, d)\n    return pair(n)[0]\n",
    ),
    "closed_form": (
        "import math\n\ndef fib(n):\n    phi = (1 + math.sqrt(5)) / 2\n"
        "    return round(phi ** n / math.sqrt(5))\n",
    ),
}

TASK = Task(
    name="fib",
    title="Fibonacci",
    prompt=PROMPT,
    entry="fib",
    harness=HARNESS,
    functional=tuple(Case(f"fib({n})", f"_fib_ref({n})") for n in (0, 1, 2, 3, 5, 10, 20)),
    large=(Case("fib(90)", "_fib_ref(90)"), Case("fib(300)", "_fib_ref(300)")),
    families=("naive", "memoized", "iterative", "matrix", "closed_form"),
    rules=rules,
    references=REFERENCES,
    named=("iterative", "an iterative loop that keeps the last two values"),
    source="paper",
)
