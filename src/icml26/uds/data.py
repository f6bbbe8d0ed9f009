"""Generated SFT data for the claim: programmatic task families with controlled redundancy and
label noise (the two conditions that separate utility-only from utility-plus-diversity
selection), and a clean, balanced held-out split. Everything is drawn from a seed."""

from __future__ import annotations

import functools
import random
import re
import string
from dataclasses import dataclass

from icml26.uds.loop import SFTExample

FAMILIES = ("add", "sub", "mul", "rev", "sort", "wiki")


@functools.lru_cache(maxsize=4)
def _wiki(split: str) -> tuple[tuple[str, str], ...]:
    """(title, first sentence) of the packaged Wikipedia leads of one split."""
    from icml26.core.text import documents, split_of

    out = []
    for title, text, _ in documents("wiki"):
        if split_of(title) == split and len(text) > 20:
            first = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0]
            out.append((title, first[:200]))
    return tuple(out)


def _task(family: str, rng: random.Random, split: str = "train") -> tuple[str, str]:
    if family == "wiki":  # held-out sets draw from other articles than the pool
        title, first = rng.choice(_wiki(split))
        return f"What is {title}?", first
    if family == "add":
        a, b = rng.randrange(100), rng.randrange(100)
        return f"{a}+{b}=", str(a + b)
    if family == "sub":
        a, b = sorted((rng.randrange(100), rng.randrange(100)), reverse=True)
        return f"{a}-{b}=", str(a - b)
    if family == "mul":
        a, b = rng.randrange(13), rng.randrange(13)
        return f"{a}*{b}=", str(a * b)
    word = "".join(rng.choice(string.ascii_lowercase[:12]) for _ in range(rng.randint(3, 6)))
    if family == "rev":
        return f"rev {word}=", word[::-1]
    if family == "sort":
        return f"sort {word}=", "".join(sorted(word))
    raise ValueError(f"unknown family {family!r}; choose from {FAMILIES}")


@dataclass(frozen=True)
class PoolConfig:
    """n_train: pool size; n_test: held-out size (balanced over families, clean, unseen prompts);
    n_val: a second held-out set built the same way (LR tuning), disjoint from test and pool.
    dup_frac: share of the pool drawn from ``n_templates`` fixed examples (redundancy);
    noise_frac: share whose response is replaced by a random string (label noise)."""

    n_train: int = 2048
    n_test: int = 250
    n_val: int = 0
    dup_frac: float = 0.5
    n_templates: int = 6
    noise_frac: float = 0.1
    families: tuple[str, ...] = FAMILIES[:5]

    def __post_init__(self):
        if self.n_train < 1 or self.n_test < 1:
            raise ValueError(f"n_train and n_test must be >= 1; got {self.n_train}, {self.n_test}")
        for name in ("dup_frac", "noise_frac"):
            v = getattr(self, name)
            if not 0 <= v < 1:
                raise ValueError(f"{name} must be in [0, 1); got {v}")
        if self.dup_frac > 0 and self.n_templates < 1:
            raise ValueError(f"n_templates must be >= 1; got {self.n_templates}")
        bad = [f for f in self.families if f not in FAMILIES]
        if bad or not self.families:
            raise ValueError(
                f"families must be a non-empty subset of {FAMILIES}; got {self.families}"
            )


def make_pool(cfg: PoolConfig, seed: int = 0) -> tuple[list[SFTExample], list[SFTExample]]:
    """(train pool, held-out test); the validation set is :func:`make_val`. Pool sources: ``FAMILY`` (clean), ``dup:FAMILY`` (repeated
    templates), noisy examples keep their family and carry ``noisy=True``."""
    pool, test, _ = _make(cfg, seed)
    return pool, test


def make_val(cfg: PoolConfig, seed: int = 0) -> list[SFTExample]:
    """The validation set that goes with ``make_pool(cfg, seed)``: clean, balanced, unseen."""
    return _make(cfg, seed)[2]


def _balanced(
    cfg: PoolConfig, n: int, rng: random.Random, seen: set, split: str
) -> list[SFTExample]:
    out, tries = [], 0
    while len(out) < n:
        tries += 1
        if tries > 100 * (n + 10):
            raise ValueError(
                f"cannot draw {n} distinct held-out prompts from families {cfg.families}"
            )
        fam = cfg.families[len(out) % len(cfg.families)]
        p, r = _task(fam, rng, split)
        if p not in seen:
            seen.add(p)
            out.append(SFTExample(p, r, fam))
    return out


def _make(cfg: PoolConfig, seed: int):
    rng = random.Random(seed)
    seen: set = set()
    test = _balanced(cfg, cfg.n_test, rng, seen, "test")
    val = _balanced(cfg, cfg.n_val, random.Random(seed + 7919), seen, "validation")
    templates = []
    while len(templates) < cfg.n_templates:
        fam = rng.choice(cfg.families)
        p, r = _task(fam, rng)
        if p not in seen:
            seen.add(p)
            templates.append(SFTExample(p, r, "dup:" + fam))
    held_out = {t.prompt for t in test + val}
    n_dup = int(round(cfg.dup_frac * cfg.n_train))
    pool = [rng.choice(templates) for _ in range(n_dup)]
    while len(pool) < cfg.n_train:
        fam = rng.choice(cfg.families)
        p, r = _task(fam, rng)
        if p not in held_out:
            pool.append(SFTExample(p, r, fam))
    rng.shuffle(pool)
    n_noise = int(round(cfg.noise_frac * cfg.n_train))
    alphabet = string.ascii_lowercase + string.digits
    for i in rng.sample(range(cfg.n_train), n_noise):
        ex = pool[i]
        junk = "".join(rng.choice(alphabet) for _ in range(rng.randint(3, 8)))
        pool[i] = SFTExample(ex.prompt, junk, ex.source.removeprefix("dup:"), noisy=True)
    return pool, test, val
