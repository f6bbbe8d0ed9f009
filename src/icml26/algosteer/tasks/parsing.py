"""Arithmetic parsing [paper: parsing; a "prototype" cue brings out ``eval``]: ``eval``,
recursive descent, shunting-yard (operator stack)."""

from __future__ import annotations

import ast

from icml26.algosteer.astq import Program, call_name
from icml26.algosteer.tasks.base import Case, Task

PROMPT = (
    "Write a Python function `evaluate(expr)` that evaluates an arithmetic expression given as a "
    "string. It contains non-negative integers, the operators `+`, `-`, `*` and `/` (true "
    "division), parentheses and spaces, with the usual precedence and left associativity. "
    "Return the value as a number."
)

HARNESS = """
def _close(got, want):
    return isinstance(got, (int, float)) and abs(got - want) <= 1e-9 * max(1.0, abs(want))

def _long_sum(n):
    return " + ".join(["1"] * n)

def _deep(depth):
    return "(" * depth + "7" + ")" * depth
"""

_CASES = (
    ("42", 42),
    ("1 + 2", 3),
    ("2 + 3 * 4", 14),
    ("(2 + 3) * 4", 20),
    ("10 / 4", 2.5),
    ("8 - 3 - 2", 3),
    ("100/10/5", 2),
    ("2 * (3 + (4 - 1)) / 3", 4),
    ("7 - 2 * 3 + 12 / (1 + 3)", 4),
)

_EVAL_NAMES = ("eval", "exec", "literal_eval", "compile", "simple_eval", "sympify", "parse_expr")


def precedence_table(p: Program) -> bool:
    """A dict literal keyed by operator characters (``{'+': 1, '*': 2}``)."""
    for d in p.nodes(ast.Dict):
        keys = {k.value for k in d.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        if len(keys & {"+", "-", "*", "/"}) >= 2:
            return True
    return False


def operator_stack(p: Program) -> bool:
    """A list used as a stack (``append`` + ``pop``) inside a loop that reads the string."""
    for loop in p.nodes(ast.While, ast.For):
        methods = {
            n.func.attr
            for n in ast.walk(loop)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
        }
        if "pop" in methods and "append" in methods:
            return True
    return False


def rules(p: Program) -> tuple[str, str] | None:
    hits = p.calls(*_EVAL_NAMES)
    if hits:
        return "eval", f"calls {call_name(hits[0])}"
    rec = p.recursive_functions()
    if rec:
        return "recursive_descent", f"(mutually) recursive {sorted(rec)[0]!r}"
    if operator_stack(p):
        why = "operator stack + precedence table" if precedence_table(p) else "operator stack"
        return "shunting_yard", why
    return None


REFERENCES = {
    "eval": (
        "def evaluate(expr):\n    return eval(expr, {'__builtins__': {}}, {})\n",
        "import ast, operator\n\n"
        "OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,\n"
        "       ast.Div: operator.truediv}\n\n"
        "def evaluate(expr):\n"
        "    code = compile(expr, '<expr>', 'eval')\n"
        "    return eval(code)\n",
    ),
    "recursive_descent": (
        "def evaluate(expr):\n"
        "    tokens = []\n"
        "    i = 0\n"
        "    while i < len(expr):\n"
        "        c = expr[i]\n"
        "        if c.isdigit():\n"
        "            j = i\n"
        "            while j < len(expr) and expr[j].isdigit():\n"
        "                j += 1\n"
        "            tokens.append(int(expr[i:j]))\n"
        "            i = j\n"
        "            continue\n"
        "        if c in '+-*/()':\n"
        "            tokens.append(c)\n"
        "        i += 1\n"
        "    pos = 0\n"
        "    def peek():\n"
        "        return tokens[pos] if pos < len(tokens) else None\n"
        "    def take():\n"
        "        nonlocal pos\n"
        "        pos += 1\n"
        "        return tokens[pos - 1]\n"
        "    def expression():\n"
        "        value = term()\n"
        "        while peek() in ('+', '-'):\n"
        "            value = value + term() if take() == '+' else value - term()\n"
        "        return value\n"
        "    def term():\n"
        "        value = factor()\n"
        "        while peek() in ('*', '/'):\n"
        "            value = value * factor() if take() == '*' else value / factor()\n"
        "        return value\n"
        "    def factor():\n"
        "        tok = take()\n"
        "        if tok == '(':\n"
        "            value = expression()\n"
        "            take()\n"
        "            return value\n"
        "        return tok\n"
        "    return expression()\n",
    ),
    "shunting_yard": (
        "def evaluate(expr):\n"
        "    prec = {'+': 1, '-': 1, '*': 2, '/': 2}\n"
        "    nums, ops = [], []\n"
        "    def apply():\n"
        "        op = ops.pop()\n"
        "        b, a = nums.pop(), nums.pop()\n"
        "        nums.append(a + b if op == '+' else a - b if op == '-' else a * b if op == '*'\n"
        "                    else a / b)\n"
        "    i = 0\n"
        "    while i < len(expr):\n"
        "        c = expr[i]\n"
        "        if c.isdigit():\n"
        "            j = i\n"
        "            while j < len(expr) and expr[j].isdigit():\n"
        "                j += 1\n"
        "            nums.append(int(expr[i:j]))\n"
        "            i = j\n"
        "            continue\n"
        "        if c == '(':\n"
        "            ops.append(c)\n"
        "        elif c == ')':\n"
        "            while ops[-1] != '(':\n"
        "                apply()\n"
        "            ops.pop()\n"
        "        elif c in prec:\n"
        "            while ops and ops[-1] != '(' and prec[ops[-1]] >= prec[c]:\n"
        "                apply()\n"
        "            ops.append(c)\n"
        "        i += 1\n"
        "    while ops:\n"
        "        apply()\n"
        "    return nums[0]\n",
    ),
}

TASK = Task(
    name="parsing",
    title="Arithmetic expression evaluation",
    prompt=PROMPT,
    entry="evaluate",
    harness=HARNESS,
    functional=tuple(Case(f"_close(evaluate({e!r}), {v})", "True") for e, v in _CASES),
    large=(
        Case("_close(evaluate(_long_sum(5000)), 5000)", "True"),
        Case("_close(evaluate(_deep(300)), 7)", "True"),
    ),
    families=("eval", "recursive_descent", "shunting_yard"),
    rules=rules,
    references=REFERENCES,
    named=("recursive_descent", "a hand-written recursive-descent parser (no eval)"),
    source="paper",
)
