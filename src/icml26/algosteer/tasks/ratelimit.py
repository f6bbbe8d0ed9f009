"""Rate limiter [paper: rate limiting, an "applied" task]: token bucket, leaky bucket, fixed
window, sliding log, sliding-window counter.

The interface takes the clock as an argument (``allow(now)``) so the tests are deterministic; the
functional tests check properties every correct family satisfies (a burst admits exactly
``limit``; traffic well under the rate is never refused; the limiter recovers after idling; a
long flood is held to 75-115% of ``limit`` per ``window``: a sliding-window counter under-admits a steady flood by design), not one family's exact decisions.
"""

from __future__ import annotations

import ast

from icml26.algosteer.astq import Program, dotted
from icml26.algosteer.tasks.base import Case, Task

PROMPT = (
    "Write a Python class `RateLimiter` with `__init__(self, limit, window)` and a method "
    "`allow(self, now)` that returns True if a request at time `now` (in seconds, a float; calls "
    "come in non-decreasing time order) may proceed, and False otherwise, so that at most about "
    "`limit` requests are allowed per `window` seconds."
)

HARNESS = """
def _burst(cls, limit=3, n=10):
    rl = cls(limit, 1.0)
    return sum(bool(rl.allow(0.0)) for _ in range(n))

def _spaced(cls):
    rl = cls(3, 1.0)
    return all(rl.allow(0.5 * i) for i in range(21))

def _recovers(cls):
    rl = cls(2, 1.0)
    for _ in range(5):
        rl.allow(0.0)
    return bool(rl.allow(5.0))

def _flood(cls, limit=5, seconds=20, step=0.01):
    rl = cls(limit, 1.0)
    n = int(round(seconds / step))
    return sum(bool(rl.allow(i * step)) for i in range(n))

def _independent(cls):
    a, b = cls(1, 1.0), cls(1, 1.0)
    return bool(a.allow(0.0)) and bool(b.allow(0.0)) and not a.allow(0.0)
"""


def _aug(p: Program, op: type, value: int = 1) -> bool:
    """An augmented assignment ``x op= value`` (e.g. ``self.tokens -= 1``)."""
    return any(
        isinstance(n.op, op) and isinstance(n.value, ast.Constant) and n.value.value == value
        for n in p.nodes(ast.AugAssign)
    )


def _call_with(p: Program, name: str, op: type) -> bool:
    """``name(...)`` (``min``/``max``) with an argument containing a ``BinOp`` of type ``op``."""
    for call in p.calls(name):
        for arg in call.args:
            if any(isinstance(n, ast.BinOp) and isinstance(n.op, op) for n in ast.walk(arg)):
                return True
    return False


def _window_index(p: Program) -> bool:
    """``now // window`` or ``int(now / window)``: the index of a fixed window."""
    if any(isinstance(n.op, ast.FloorDiv) for n in p.nodes(ast.BinOp)):
        return True
    for call in p.calls("int", "floor"):
        if (
            call.args
            and isinstance(call.args[0], ast.BinOp)
            and isinstance(call.args[0].op, ast.Div)
        ):
            return True
    return False


def _weighted(p: Program) -> bool:
    """A count scaled by a fraction of the window: a ``*`` whose operand holds a true division,
    or ``1 - x`` times something (the previous window's weight)."""
    for n in p.nodes(ast.BinOp):
        if not isinstance(n.op, ast.Mult):
            continue
        for side in (n.left, n.right):
            if any(isinstance(s, ast.BinOp) and isinstance(s.op, ast.Div) for s in ast.walk(side)):
                return True
            if (
                isinstance(side, ast.BinOp)
                and isinstance(side.op, ast.Sub)
                and isinstance(side.left, ast.Constant)
                and side.left.value == 1
            ):
                return True
    return False


def _timestamp_log(p: Program) -> str | None:
    """A container of timestamps pruned from the front (``popleft``/``pop(0)``/``del x[0]``) or
    filtered by a comparison, whose length is compared with the limit."""
    pruned = bool(p.method_calls("popleft"))
    pruned |= any(
        c.args and isinstance(c.args[0], ast.Constant) and c.args[0].value == 0
        for c in p.method_calls("pop")
    )
    for n in p.nodes(ast.Delete):
        pruned |= any(isinstance(t, ast.Subscript) for t in n.targets)
    for n in p.nodes(ast.Assign):
        if isinstance(n.value, ast.ListComp) and any(
            isinstance(x, ast.Compare) for g in n.value.generators for x in g.ifs
        ):
            pruned = True
    pruned |= bool(p.calls("bisect", "bisect_left", "bisect_right")) and any(
        True for _ in p.nodes(ast.Slice)
    )
    if pruned and p.method_calls("append") and p.calls("len"):
        return "timestamps pruned from the front + len()"
    return None


def rules(p: Program) -> tuple[str, str] | None:
    why = _timestamp_log(p)
    if why:
        return "sliding_log", why
    if _call_with(p, "min", ast.Add) and (_aug(p, ast.Sub) or _call_with(p, "min", ast.Mult)):
        return "token_bucket", "refill capped with min(), spend a token"
    if _call_with(p, "max", ast.Sub) and _aug(p, ast.Add):
        return "leaky_bucket", "drain floored with max(), add a drop"
    if _window_index(p) and _weighted(p):
        return "sliding_counter", "window index + weighted previous count"
    if _window_index(p) and _aug(p, ast.Add):
        return "fixed_window", "window index + counter"
    # elapsed-time reset: ``if now - start >= window: start = now; count = 0``
    resets = any(
        isinstance(n.value, ast.Constant) and n.value.value == 0 and dotted(n.targets[0])
        for n in p.nodes(ast.Assign)
    )
    if resets and _aug(p, ast.Add):
        return "fixed_window", "counter reset when the window elapses"
    if _aug(p, ast.Sub) and (p.calls("min") or _weighted(p)):
        return "token_bucket", "tokens refilled by elapsed time, spent one at a time"
    return None


REFERENCES = {
    "token_bucket": (
        "class RateLimiter:\n"
        "    def __init__(self, limit, window):\n"
        "        self.capacity = limit\n"
        "        self.rate = limit / window\n"
        "        self.tokens = float(limit)\n"
        "        self.last = None\n"
        "    def allow(self, now):\n"
        "        if self.last is not None:\n"
        "            self.tokens = min(self.capacity, self.tokens + (now - self.last) * self.rate)\n"
        "        self.last = now\n"
        "        if self.tokens >= 1:\n"
        "            self.tokens -= 1\n"
        "            return True\n"
        "        return False\n",
    ),
    "leaky_bucket": (
        "class RateLimiter:\n"
        "    def __init__(self, limit, window):\n"
        "        self.capacity = limit\n"
        "        self.leak = limit / window\n"
        "        self.level = 0.0\n"
        "        self.last = 0.0\n"
        "    def allow(self, now):\n"
        "        self.level = max(0.0, self.level - (now - self.last) * self.leak)\n"
        "        self.last = now\n"
        "        if self.level + 1 <= self.capacity + 1e-9:\n"
        "            self.level += 1\n"
        "            return True\n"
        "        return False\n",
    ),
    "fixed_window": (
        "class RateLimiter:\n"
        "    def __init__(self, limit, window):\n"
        "        self.limit, self.window = limit, window\n"
        "        self.current = None\n"
        "        self.count = 0\n"
        "    def allow(self, now):\n"
        "        index = now // self.window\n"
        "        if index != self.current:\n"
        "            self.current, self.count = index, 0\n"
        "        if self.count < self.limit:\n"
        "            self.count += 1\n"
        "            return True\n"
        "        return False\n",
        "class RateLimiter:\n"
        "    def __init__(self, limit, window):\n"
        "        self.limit, self.window = limit, window\n"
        "        self.start = 0.0\n"
        "        self.count = 0\n"
        "    def allow(self, now):\n"
        "        if now - self.start >= self.window:\n"
        "            self.start = now\n"
        "            self.count = 0\n"
        "        if self.count < self.limit:\n"
        "            self.count += 1\n"
        "            return True\n"
        "        return False\n",
    ),
    "sliding_log": (
        "from collections import deque\n\n"
        "class RateLimiter:\n"
        "    def __init__(self, limit, window):\n"
        "        self.limit, self.window = limit, window\n"
        "        self.log = deque()\n"
        "    def allow(self, now):\n"
        "        while self.log and now - self.log[0] >= self.window:\n"
        "            self.log.popleft()\n"
        "        if len(self.log) < self.limit:\n"
        "            self.log.append(now)\n"
        "            return True\n"
        "        return False\n",
    ),
    "sliding_counter": (
        "class RateLimiter:\n"
        "    def __init__(self, limit, window):\n"
        "        self.limit, self.window = limit, window\n"
        "        self.index = 0\n"
        "        self.prev = 0\n"
        "        self.curr = 0\n"
        "    def allow(self, now):\n"
        "        index = int(now // self.window)\n"
        "        if index != self.index:\n"
        "            self.prev = self.curr if index == self.index + 1 else 0\n"
        "            self.curr = 0\n"
        "            self.index = index\n"
        "        elapsed = (now % self.window) / self.window\n"
        "        estimate = self.prev * (1 - elapsed) + self.curr\n"
        "        if estimate + 1 <= self.limit + 1e-9:\n"
        "            self.curr += 1\n"
        "            return True\n"
        "        return False\n",
    ),
}

TASK = Task(
    name="ratelimit",
    title="Rate limiter",
    prompt=PROMPT,
    entry="RateLimiter",
    harness=HARNESS,
    functional=(
        Case("_burst(RateLimiter)", "3"),
        Case("_spaced(RateLimiter)", "True"),
        Case("_recovers(RateLimiter)", "True"),
        Case("75 <= _flood(RateLimiter) <= 115", "True"),
        Case("_independent(RateLimiter)", "True"),
    ),
    large=(Case("_flood(RateLimiter, limit=100000, seconds=2, step=1e-5) > 0", "True"),),
    families=("token_bucket", "leaky_bucket", "fixed_window", "sliding_log", "sliding_counter"),
    rules=rules,
    references=REFERENCES,
    named=("token_bucket", "a token bucket (tokens refilled at a steady rate)"),
    entry_is_class=True,
    source="paper",
)
