"""Sandbox: outcomes for misbehaving programs, limits honoured, pool == fresh interpreter."""

import time

import pytest

from icml26.algosteer.sandbox import Limits, SandboxPool, run_tests
from icml26.algosteer.tasks import TASKS, get_task

FIB = get_task("fib")
OK = "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n"


@pytest.mark.parametrize(
    ("code", "outcome"),
    [
        (OK, "pass"),
        ("def fib(n):\n    return n\n", "fail"),
        (
            "def fibonacci(n):\n    return 0 if n == 0 else 1 if n < 3 else fibonacci(n-1)+fibonacci(n-2)\n",
            "pass",
        ),  # entry aliased: the only public function
        ("def g(n):\n    return 1\ndef h(n):\n    return 2\n", "fail"),  # ambiguous: no alias
        ("import sys\nsys.exit(0)\n", "crash"),
        ("raise SystemExit(3)\n", "crash"),
        ("import os\nos._exit(0)\n", "crash"),
        ("x = 1 +\n", "crash"),
        ("def fib(n):\n    raise ValueError('no')\n", "fail"),
        ("", "unparsable"),
        ("def fib(n):\n    print('x' * 10_000_000)\n    return " + "0 if n < 1 else 1\n", "fail"),
    ],
)
def test_outcomes(code, outcome):
    assert run_tests(code, FIB, Limits(time_s=5)).outcome == outcome


def test_infinite_loop_times_out_within_limit_plus_one_second():
    t0 = time.perf_counter()
    out = run_tests("def fib(n):\n    while True:\n        pass\n", FIB, Limits(time_s=1.0))
    assert out.outcome == "timeout"
    assert time.perf_counter() - t0 < 1.0 + 1.0


def test_memory_bomb_is_memory():
    code = "def fib(n):\n    x = []\n    while True:\n        x.append(bytearray(10**7))\n"
    out = run_tests(code, FIB, Limits(time_s=10, mem_mb=256))
    assert out.outcome == "memory"


def test_fork_bomb_is_stopped():
    code = (
        "import os\ndef fib(n):\n    for _ in range(50):\n        try:\n            os.fork()\n"
        "        except OSError:\n            return -1\n    return 0\n"
    )
    t0 = time.perf_counter()
    out = run_tests(code, FIB, Limits(time_s=3))
    assert out.outcome in ("fail", "timeout", "crash")
    assert time.perf_counter() - t0 < 5


def test_output_flood_is_capped_and_program_still_judged():
    code = "import sys\nfor _ in range(10**5):\n    sys.stdout.write('y' * 1000)\n" + OK
    assert run_tests(code, FIB, Limits(time_s=10, max_output=1000)).outcome == "pass"
    code = "import os\nfor _ in range(10**4):\n    os.write(1, b'z' * 1000)\n" + OK
    assert run_tests(code, FIB, Limits(time_s=10)).outcome == "pass"


def test_large_cases_are_a_family_property_not_a_gate():
    naive = TASKS["fib"].references["naive"][0]
    assert run_tests(naive, FIB, Limits(time_s=5)).outcome == "pass"
    assert run_tests(naive, FIB, Limits(time_s=1), kind="large").outcome == "timeout"
    rec = TASKS["tree"].references["recursive"][0]
    out = run_tests(rec, TASKS["tree"], Limits(time_s=10), kind="large")
    assert out.outcome == "fail" and "RecursionError" in out.error


def test_pool_matches_fresh_interpreter():
    codes = [
        OK,
        "def fib(n):\n    return n\n",
        "import sys\nsys.exit(1)\n",
        "def fib(n):\n    while 1: pass\n",
        "",
    ]
    limits = Limits(time_s=1.0)
    fresh = [run_tests(c, FIB, limits).outcome for c in codes]
    with SandboxPool(2) as pool:
        pooled = [o.outcome for o in pool.map(codes, FIB, limits)]
    assert pooled == fresh == ["pass", "fail", "crash", "timeout", "unparsable"]


def test_limits_validate():
    with pytest.raises(ValueError, match="time_s"):
        Limits(time_s=0)
    with pytest.raises(ValueError, match="mem_mb"):
        Limits(mem_mb=1)
