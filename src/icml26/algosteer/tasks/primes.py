"""Primes up to n [paper: primes]: sieve of Eratosthenes, trial division up to the square root,
trial division by the primes found so far, naive trial division."""

from __future__ import annotations

import ast

from icml26.algosteer.astq import Program
from icml26.algosteer.tasks.base import Case, Task

PROMPT = (
    "Write a Python function `primes_up_to(n)` that returns the list of all prime numbers less "
    "than or equal to `n`, in ascending order (an empty list when n < 2)."
)

HARNESS = """
def _primes_ref(n):
    if n < 2:
        return []
    flags = bytearray([1]) * (n + 1)
    flags[0] = flags[1] = 0
    for i in range(2, int(n ** 0.5) + 1):
        if flags[i]:
            flags[i * i :: i] = bytearray(len(range(i * i, n + 1, i)))
    return [i for i in range(n + 1) if flags[i]]
"""


def flag_table(p: Program) -> bool:
    """A boolean table ``[True] * (n + 1)`` / ``bytearray`` with stores by index or slice."""
    for node in p.nodes(ast.BinOp):
        if isinstance(node.op, ast.Mult):
            for side in (node.left, node.right):
                if (
                    isinstance(side, ast.List)
                    and len(side.elts) == 1
                    and isinstance(side.elts[0], ast.Constant)
                    and side.elts[0].value in (True, False, 0, 1)
                ):
                    return True
    return bool(p.calls("bytearray"))


def stepped_range(p: Program) -> bool:
    """``range(start, stop, i)`` with a non-constant step, or a slice with a step (marking
    multiples)."""
    for call in p.calls("range"):
        if len(call.args) == 3 and not isinstance(call.args[2], ast.Constant):
            return True
    return any(n.step is not None for n in p.nodes(ast.Slice))


def sqrt_bound(p: Program) -> str | None:
    if p.calls("sqrt", "isqrt"):
        return "sqrt bound"
    for node in p.nodes(ast.BinOp):
        if (
            isinstance(node.op, ast.Pow)
            and isinstance(node.right, ast.Constant)
            and node.right.value == 0.5
        ):
            return "** 0.5 bound"
    for node in p.nodes(ast.Compare):
        left = node.left
        if (
            isinstance(left, ast.BinOp)
            and isinstance(left.op, ast.Mult)
            and isinstance(node.ops[0], (ast.Lt, ast.LtE, ast.Gt, ast.GtE))
            and ast.dump(left.left) == ast.dump(left.right)
        ):
            return "i * i <= n bound"
        if isinstance(left, ast.BinOp) and isinstance(left.op, ast.Pow):
            return "i ** 2 <= n bound"
    return None


def loops_over_result(p: Program) -> bool:
    """A ``for p in primes`` loop over the list the function appends primes to."""
    appended = {
        n.func.value.id for n in p.method_calls("append") if isinstance(n.func.value, ast.Name)
    }
    for loop in p.nodes(ast.For, ast.comprehension):
        if isinstance(loop.iter, ast.Name) and loop.iter.id in appended:
            return True
    return False


def rules(p: Program) -> tuple[str, str] | None:
    if flag_table(p) and stepped_range(p):
        return "sieve", "flag table + marking multiples"
    if flag_table(p) and p.loop_depth() >= 2 and p.subscript_store_names():
        return "sieve", "flag table + marking multiples"
    has_mod = any(isinstance(n.op, ast.Mod) for n in p.nodes(ast.BinOp))
    if not has_mod:
        return None
    if loops_over_result(p):
        return "trial_primes", "divide by the primes found so far"
    why = sqrt_bound(p)
    if why:
        return "trial_sqrt", why
    if p.loop_depth() >= 2 or p.recursive_functions() or p.calls("all", "any"):
        return "trial_naive", "divide by every smaller number"
    if len(p.function_names) >= 2 and p.has_loop():
        return "trial_naive", "helper is_prime over all divisors"
    return None


REFERENCES = {
    "sieve": (
        "def primes_up_to(n):\n    if n < 2:\n        return []\n    is_prime = [True] * (n + 1)\n"
        "    is_prime[0] = is_prime[1] = False\n    for i in range(2, int(n ** 0.5) + 1):\n"
        "        if is_prime[i]:\n            for j in range(i * i, n + 1, i):\n"
        "                is_prime[j] = False\n    return [i for i, p in enumerate(is_prime) if p]\n",
    ),
    "trial_sqrt": (
        "import math\n\ndef primes_up_to(n):\n    out = []\n    for k in range(2, n + 1):\n"
        "        if all(k % d for d in range(2, math.isqrt(k) + 1)):\n            out.append(k)\n"
        "    return out\n",
        "def is_prime(k):\n    if k < 2:\n        return False\n    d = 2\n    while d * d <= k:\n"
        "        if k % d == 0:\n            return False\n        d += 1\n    return True\n\n"
        "def primes_up_to(n):\n    return [k for k in range(n + 1) if is_prime(k)]\n",
    ),
    "trial_primes": (
        "def primes_up_to(n):\n    primes = []\n    for k in range(2, n + 1):\n"
        "        for p in primes:\n            if p * p > k:\n                primes.append(k)\n"
        "                break\n            if k % p == 0:\n                break\n        else:\n"
        "            primes.append(k)\n    return primes\n",
    ),
    "trial_naive": (
        "def primes_up_to(n):\n    out = []\n    for k in range(2, n + 1):\n"
        "        prime = True\n        for d in range(2, k):\n            if k % d == 0:\n"
        "                prime = False\n                break\n        if prime:\n"
        "            out.append(k)\n    return out\n",
    ),
}

TASK = Task(
    name="primes",
    title="Primes up to n",
    prompt=PROMPT,
    entry="primes_up_to",
    harness=HARNESS,
    functional=tuple(
        Case(f"primes_up_to({n})", f"_primes_ref({n})") for n in (0, 1, 2, 3, 10, 30, 100, 541)
    ),
    large=(Case("primes_up_to(300000)", "_primes_ref(300000)"),),
    families=("sieve", "trial_sqrt", "trial_primes", "trial_naive"),
    rules=rules,
    references=REFERENCES,
    named=("sieve", "the sieve of Eratosthenes"),
    source="paper",
)
