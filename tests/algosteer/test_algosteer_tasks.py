"""The eleven tasks: every reference program passes its task's functional tests (the gate);
plausible wrong programs fail them; slow families are slow only on the large inputs."""

import pytest

from icml26.algosteer.classify import classify
from icml26.algosteer.sandbox import Limits, SandboxPool, run_tests
from icml26.algosteer.tasks import TASKS, get_task

PAPER_TASKS = {
    "fib",
    "tree",
    "ratelimit",
    "parsing",
    "sorting",
    "search",
    "memo",
    "lru",
    "dedup",
    "primes",
    "shortest",
}


def test_all_eleven_tasks_exist_with_three_references():
    assert set(TASKS) == PAPER_TASKS
    for t in TASKS.values():
        assert len(t.families) >= 3, t.name
        assert sum(map(len, t.references.values())) >= 3, t.name
        assert t.named[0] in t.families


def test_every_reference_passes_the_functional_gate():
    jobs = [
        (t, fam, code)
        for t in TASKS.values()
        for fam, codes in t.references.items()
        for code in codes
    ]
    with SandboxPool(2) as pool:
        outs = list(
            pool.imap(lambda j: pool.run(j[2], j[0], Limits(time_s=10), "functional"), jobs)
        )
    bad = [
        (t.name, fam, o.outcome, o.error)
        for (t, fam, _), o in zip(jobs, outs, strict=True)
        if o.outcome != "pass"
    ]
    assert not bad


# Plausible wrong answers: each must fail the gate (and the tests are not trivially passable).
WRONG = {
    "ratelimit": "class RateLimiter:\n    def __init__(self, limit, window):\n        pass\n"
    "    def allow(self, now):\n        return True\n",
    "parsing": "def evaluate(expr):\n    tokens = expr.replace('(', ' ').replace(')', ' ').split()\n"
    "    value = float(tokens[0]) if tokens else 0\n    return value\n",
    "sorting": "def sort_list(items):\n    return list(items)\n",
    "search": "def search(items, target):\n    return items.index(target)\n",
    # counts ordered sequences (compositions), not combinations
    "memo": "def count_ways(amount, coins):\n    t = [1] + [0] * amount\n"
    "    for a in range(1, amount + 1):\n        for c in coins:\n            if c <= a:\n"
    "                t[a] += t[a - c]\n    return t[amount]\n",
    # evicts the oldest inserted key (FIFO), not the least recently used
    "lru": "class LRUCache:\n    def __init__(self, capacity):\n        self.c, self.d = capacity, {}\n"
    "    def get(self, key):\n        return self.d.get(key, -1)\n"
    "    def put(self, key, value):\n        if key not in self.d and len(self.d) >= self.c:\n"
    "            del self.d[next(iter(self.d))]\n        self.d[key] = value\n",
    "primes": "def primes_up_to(n):\n    return [k for k in range(1, n + 1)"
    " if all(k % d for d in range(2, k))]\n",
    # fewest hops, ignoring weights
    "shortest": "from collections import deque\n\ndef shortest_path(graph, source, target):\n"
    "    dist = {source: 0}\n    q = deque([source])\n    while q:\n        u = q.popleft()\n"
    "        for v, w in graph[u]:\n            if v not in dist:\n                dist[v] = dist[u] + 1\n"
    "                q.append(v)\n    return dist.get(target, -1)\n",
}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_wrong_programs_fail_the_gate(name):
    assert run_tests(WRONG[name], get_task(name), Limits(time_s=5)).outcome == "fail"


@pytest.mark.parametrize(
    ("task", "slow", "fast"),
    [("sorting", "bubble", "builtin"), ("lru", "list_order", "ordered_dict")],
)
def test_large_inputs_separate_slow_families(task, slow, fast):
    t = get_task(task)
    assert run_tests(t.references[fast][0], t, Limits(time_s=10), kind="large").outcome == "pass"
    assert run_tests(t.references[slow][0], t, Limits(time_s=1), kind="large").outcome == "timeout"


# Variants written the way models tend to write them (clock from time.time(), other names).
VARIANTS = [
    (
        "ratelimit",
        "token_bucket",
        "import time\n\nclass RateLimiter:\n    def __init__(self, limit, window):\n"
        "        self.rate = limit / window\n        self.allowance = limit\n        self.cap = limit\n"
        "        self.stamp = 0.0\n    def allow(self, now=None):\n"
        "        now = time.time() if now is None else now\n"
        "        self.allowance = min(self.cap, self.allowance + (now - self.stamp) * self.rate)\n"
        "        self.stamp = now\n        if self.allowance < 1:\n            return False\n"
        "        self.allowance -= 1\n        return True\n",
    ),
    (
        "ratelimit",
        "sliding_log",
        "class RateLimiter:\n    def __init__(self, limit, window):\n        self.limit = limit\n"
        "        self.window = window\n        self.calls = []\n    def allow(self, now):\n"
        "        self.calls = [t for t in self.calls if now - t < self.window]\n"
        "        if len(self.calls) < self.limit:\n            self.calls.append(now)\n"
        "            return True\n        return False\n",
    ),
    ("parsing", "eval", "def evaluate(expr):\n    result = eval(expr)\n    return float(result)\n"),
    (
        "sorting",
        "quicksort",
        "def sort_list(items):\n    if len(items) < 2:\n        return items[:]\n    p = items[0]\n"
        "    return sort_list([x for x in items[1:] if x < p]) + [p] + "
        "sort_list([x for x in items[1:] if x >= p])\n",
    ),
    (
        "search",
        "linear",
        "def search(items, target):\n    i = 0\n    while i < len(items):\n"
        "        if items[i] == target:\n            return i\n        i += 1\n    return -1\n",
    ),
    (
        "memo",
        "memoized",
        "from functools import cache\n\ndef count_ways(amount, coins):\n    @cache\n"
        "    def f(a, k):\n        if a == 0:\n            return 1\n        if a < 0 or k < 0:\n"
        "            return 0\n        return f(a - coins[k], k) + f(a, k - 1)\n"
        "    return f(amount, len(coins) - 1)\n",
    ),
    (
        "primes",
        "sieve",
        "def primes_up_to(n):\n    if n < 2:\n        return []\n    sieve = bytearray([1]) * (n + 1)\n"
        "    sieve[0:2] = b'\\x00\\x00'\n    for i in range(2, int(n ** 0.5) + 1):\n"
        "        if sieve[i]:\n            sieve[i * i::i] = bytearray(len(sieve[i * i::i]))\n"
        "    return [i for i in range(n + 1) if sieve[i]]\n",
    ),
    (
        "shortest",
        "dijkstra_heap",
        "from queue import PriorityQueue\n\ndef shortest_path(graph, source, target):\n"
        "    pq = PriorityQueue()\n    pq.put((0, source))\n    seen = set()\n"
        "    while not pq.empty():\n        d, u = pq.get()\n        if u == target:\n"
        "            return d\n        if u in seen:\n            continue\n        seen.add(u)\n"
        "        for v, w in graph[u]:\n            pq.put((d + w, v))\n    return -1\n",
    ),
]


@pytest.mark.parametrize(
    ("task", "family", "code"), VARIANTS, ids=[f"{t}-{f}" for t, f, _ in VARIANTS]
)
def test_model_style_variants(task, family, code):
    t = get_task(task)
    assert classify(code, t)[0] == family
    assert run_tests(code, t, Limits(time_s=10)).outcome == "pass"
