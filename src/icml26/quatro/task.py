"""Generated verifiable-reward arithmetic and the pass@k metrics.

Two task families, both with fixed-width prompts (so a batch needs no padding) and an exact
integer answer, scored 1.0 for an exact match and 0.0 otherwise:

- ``add2``: ``"ab+cd="`` two 2-digit operands (zero-padded), answer ``a+b`` (0..198);
- ``chain3``: ``"a+b+c="`` three single digits, answer 0..27.

Problems are split into train / test by a hash of the prompt, so held-out questions are
disjoint from the ones trained on for every seed.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Problem", "TASKS", "problems", "sample_problems", "score", "pass_at_k"]

TASKS = ("add2", "chain3")


@dataclass(frozen=True)
class Problem:
    prompt: str  # fixed width per task, ends with "="
    answer: str  # the decimal answer, no padding
    task: str


def _all(task: str) -> list[Problem]:
    if task == "add2":
        return [
            Problem(f"{a:02d}+{b:02d}=", str(a + b), task) for a in range(100) for b in range(100)
        ]
    if task == "chain3":
        return [
            Problem(f"{a}+{b}+{c}=", str(a + b + c), task)
            for a in range(10)
            for b in range(10)
            for c in range(10)
        ]
    raise ValueError(f"unknown task {task!r}; known: {', '.join(TASKS)}")


def _split_of(prompt: str, test_share: float) -> str:
    h = int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:8], "big") / 2**64
    return "test" if h < test_share else "train"


def problems(task: str, split: str, test_share: float = 0.2) -> list[Problem]:
    """All problems of ``task`` in ``split`` ("train" | "test"), in a fixed order."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test'; got {split!r}")
    return list(_problems(task, split, test_share))


@functools.lru_cache(maxsize=32)
def _problems(task: str, split: str, test_share: float) -> tuple[Problem, ...]:
    return tuple(p for p in _all(task) if _split_of(p.prompt, test_share) == split)


def sample_problems(
    tasks: tuple[str, ...], split: str, n: int, rng: np.random.Generator
) -> list[Problem]:
    """``n`` problems drawn with replacement, task chosen uniformly per draw."""
    pools = [_problems(t, split, 0.2) for t in tasks]
    out = []
    for _ in range(n):
        pool = pools[int(rng.integers(len(pools)))]
        out.append(pool[int(rng.integers(len(pool)))])
    return out


def score(problem: Problem, completion: str) -> float:
    """Exact-match reward: 1.0 iff the completion (up to EOS, stripped) equals the answer."""
    return 1.0 if completion.strip() == problem.answer else 0.0


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples with ``c`` correct (Chen et al., 2021): 1 - C(n-c,k)/C(n,k)."""
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)
