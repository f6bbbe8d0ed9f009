"""Multiple-choice questions: the BIG-bench reader and log-prob / letter scoring for causal LMs.

BIG-bench (Apache-2.0) is on PyPI only as a 342 MB sdist whose setup.py cannot even be prepared
offline (it declares a ``file://`` dependency), so we never pip-install it: ``bigbench_archive()``
fetches the tarball once from files.pythonhosted.org (checked against its pinned SHA-256), and the
first ``bigbench_tasks()`` call scans it (~1-2 min) and writes every JSON multiple-choice task into
``$XDG_CACHE_HOME/icml26/bigbench/tasks/`` as compact JSON. Set ``$ICML26_BIGBENCH`` to a local
copy of the tarball to skip the download.

Scoring follows the usual zero-shot conventions (lm-eval-harness, BIG-bench):
- ``method="logprob"``: the prompt is the question (with choices listed when the task asks for it),
  each choice is a continuation, and the prediction is the choice with the highest summed log-prob
  (``normalize="length"`` divides by the choice's length in UTF-8 bytes, lm-eval's acc_norm);
- ``method="letter"``: choices are listed as ``A. …`` and the prediction is the letter token with
  the highest next-token log-prob after ``Answer:``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from icml26.core.errors import UserError
from icml26.core.io import atomic_open, atomic_write_json
from icml26.core.lm import _file_lock, cache_root

BIGBENCH_URL = (
    "https://files.pythonhosted.org/packages/95/f8/c019b3579df548a04cac12342cfcb878e50ddf6cfcd7fddba8cfc721c157/bigbench-1.0.0.tar.gz"
)
BIGBENCH_SHA256 = "1bb398a5512c6d798cdebe0dfa0ac03f67f6033fa6b39c6ef71df978c7cbc5c2"
MAX_TASK_BYTES = 30_000_000  # the ten larger task files (mnist_ascii, …) are skipped
_INDEX_VERSION = 1
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True)
class MCQItem:
    """One multiple-choice question.

    ``answer`` is the index of the best choice (the first one if several tie); ``scores`` keeps the
    task's own per-choice scores when it has them (BIG-bench ``target_scores``), so items with
    several correct choices are scored as correct for any of them.
    """

    id: str
    task: str
    question: str
    choices: tuple[str, ...]
    answer: int
    scores: tuple[float, ...] | None = None
    prompt: str | None = None  # the full zero-shot prompt, when the source defines its own

    def __post_init__(self):
        if len(self.choices) < 2:
            raise ValueError(f"item {self.id}: needs at least 2 choices, got {len(self.choices)}")
        if not 0 <= self.answer < len(self.choices):
            raise ValueError(f"item {self.id}: answer {self.answer} out of range "
                             f"0..{len(self.choices) - 1}")
        if self.scores is not None and len(self.scores) != len(self.choices):
            raise ValueError(f"item {self.id}: {len(self.scores)} scores for "
                             f"{len(self.choices)} choices")

    @property
    def gold(self) -> frozenset[int]:
        """Indices counted as correct (all choices with the top score)."""
        if self.scores is None:
            return frozenset({self.answer})
        top = max(self.scores)
        return frozenset(i for i, s in enumerate(self.scores) if s == top)

    def logprob_prompt(self) -> str:
        """The zero-shot prompt for log-prob scoring: question, then ``Answer:``."""
        return self.prompt if self.prompt is not None else f"Question: {self.question}\nAnswer:"


def even_quota(sizes: dict[str, int], n: int) -> dict[str, int]:
    """How many of ``n`` items to take from each source, as evenly as the sources' ``sizes``
    allow (a small source gives all it has, the rest share its remainder); a ``UserError`` when
    all the sources together hold fewer than ``n``."""
    if sum(sizes.values()) < n:
        raise UserError(f"{list(sizes)} hold {sum(sizes.values())} items; {n} are needed")
    quota, left = dict.fromkeys(sizes, 0), n
    while left:
        open_ = [t for t in sizes if quota[t] < sizes[t]]
        share = max(1, left // len(open_))
        for t in open_:
            take = min(share, sizes[t] - quota[t], left)
            quota[t] += take
            left -= take
    return quota


# ----------------------------------------------------------------------------- BIG-bench files

def bigbench_dir() -> Path:
    return cache_root() / "bigbench"


def bigbench_archive() -> Path:
    """Path of the bigbench-1.0.0 sdist: ``$ICML26_BIGBENCH`` or the cache (downloaded once)."""
    env = os.environ.get("ICML26_BIGBENCH")
    if env:
        path = Path(env)
        if not path.is_file():
            raise UserError(f"$ICML26_BIGBENCH={env} is not a file (expected bigbench-1.0.0.tar.gz)")
        return path
    path = bigbench_dir() / "bigbench-1.0.0.tar.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(path.with_suffix(".lock")):
        if path.is_file():
            return path
        digest = hashlib.sha256()
        try:
            with urllib.request.urlopen(BIGBENCH_URL, timeout=120) as resp, \
                    atomic_open(path, "wb") as out:
                while chunk := resp.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
                if digest.hexdigest() != BIGBENCH_SHA256:
                    raise UserError(f"{BIGBENCH_URL}: SHA-256 {digest.hexdigest()} does not match "
                                    f"the pinned {BIGBENCH_SHA256}")
        except OSError as exc:
            raise UserError(f"cannot download BIG-bench from {BIGBENCH_URL} ({exc}); put the "
                            "tarball somewhere and set $ICML26_BIGBENCH to it") from None
    return path


def _task_name(member: str) -> str | None:
    parts = member.split("/")
    if "benchmark_tasks" not in parts or parts[-1] != "task.json":
        return None
    return "/".join(parts[parts.index("benchmark_tasks") + 1:-1]) or None


def _compact(task: dict) -> dict | None:
    """Keep what scoring needs from a task.json; None when it has no multiple-choice examples."""
    examples = [e for e in task.get("examples", []) if isinstance(e.get("target_scores"), dict)
                and len(e["target_scores"]) >= 2 and isinstance(e.get("input"), str)]
    if not examples:
        return None
    keys = ("task_prefix", "example_input_prefix", "example_output_prefix", "choice_prefix",
            "append_choices_to_input", "description")
    out = {k: task[k] for k in keys if k in task}
    out["examples"] = [{"input": e["input"], "target_scores": e["target_scores"]}
                       for e in examples]
    return out


def _index_path() -> Path:
    return bigbench_dir() / "tasks" / "index.json"


def _build_index(progress=None) -> dict:
    archive = bigbench_archive()
    tasks_dir = _index_path().parent
    tasks_dir.mkdir(parents=True, exist_ok=True)
    index: dict[str, dict] = {}
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            name = _task_name(member.name)
            if name is None or not member.isfile() or member.size > MAX_TASK_BYTES:
                continue
            try:
                task = json.load(tar.extractfile(member))
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            compact = _compact(task)
            if compact is None:
                continue
            file = tasks_dir / (name.replace("/", "__") + ".json")
            atomic_write_json(file, compact)
            index[name] = {"file": file.name, "n": len(compact["examples"])}
            if progress is not None:
                progress(name)
    atomic_write_json(_index_path(), {"version": _INDEX_VERSION, "archive_sha256":
                                      BIGBENCH_SHA256, "tasks": index})
    return index


def _index() -> dict:
    path = _index_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(path.with_suffix(".lock")):
        if path.is_file():
            data = json.loads(path.read_text())
            if data.get("version") == _INDEX_VERSION:
                return data["tasks"]
        return _build_index()


def bigbench_tasks() -> list[str]:
    """Names of BIG-bench's JSON multiple-choice (sub)tasks, e.g. ``logical_deduction/three_objects``."""
    return sorted(_index())


def bigbench_task_sizes() -> dict[str, int]:
    """Number of multiple-choice examples per BIG-bench task (builds the index on first use)."""
    return {name: int(v["n"]) for name, v in _index().items()}


def bigbench_ready() -> bool:
    """Whether the BIG-bench task index is already built (no download or scan needed)."""
    return _index_path().is_file()


def bigbench_local() -> bool:
    """Whether BIG-bench can be read without a download: the index is built, or
    ``$ICML26_BIGBENCH`` names a local tarball. (PyPI stopped serving bigbench-1.0.0 in December
    2026, so a claim's *default* BIG-bench part is skipped, with a note, where this is false.)"""
    return bigbench_ready() or bool(os.environ.get("ICML26_BIGBENCH"))


def load_bigbench(task: str, max_items: int | None = None, seed: int = 0,
                  shuffle_choices: bool = True) -> list[MCQItem]:
    """Items of one BIG-bench multiple-choice task.

    Args:
        task: a name from ``bigbench_tasks()``.
        max_items: keep a seeded random subset of this size (in file order).
        seed: for the subset and the choice shuffle.
        shuffle_choices: permute each item's choices (seeded); several BIG-bench tasks list the
            correct choice first, which would reward a position bias in letter scoring.
    """
    index = _index()
    if task not in index:
        close = [t for t in index if task.split("/")[0] in t][:5]
        raise UserError(f"BIG-bench has no JSON multiple-choice task {task!r}"
                        + (f"; did you mean one of {close}?" if close else ""))
    data = json.loads((_index_path().parent / index[task]["file"]).read_text())
    examples = data["examples"]
    rng = np.random.default_rng(seed)
    order = np.arange(len(examples))
    if max_items is not None and max_items < len(examples):
        order = np.sort(rng.choice(len(examples), size=max_items, replace=False))
    in_prefix = data.get("example_input_prefix", "\nQ: ")
    out_prefix = data.get("example_output_prefix", "\nA: ")
    choice_prefix = data.get("choice_prefix", "\n  choice: ")
    append = data.get("append_choices_to_input", True)
    items = []
    for i in order:
        ex = examples[int(i)]
        choices = list(ex["target_scores"])
        scores = [float(ex["target_scores"][c]) for c in choices]
        if shuffle_choices:
            perm = rng.permutation(len(choices))
            choices, scores = [choices[p] for p in perm], [scores[p] for p in perm]
        question = ex["input"]
        prompt = data.get("task_prefix", "") + in_prefix + question
        if append:
            prompt += "".join(choice_prefix + c for c in choices)
        prompt += out_prefix
        items.append(MCQItem(id=f"{task}:{int(i)}", task=task, question=question,
                             choices=tuple(str(c) for c in choices),
                             answer=int(np.argmax(scores)), scores=tuple(scores),
                             prompt=prompt.lstrip("\n")))
    return items


# ----------------------------------------------------------------------------- scoring

def letter_prompt(item: MCQItem) -> str:
    """MMLU-style prompt: the question, choices as ``A. …``, then ``Answer:``."""
    if len(item.choices) > len(LETTERS):
        raise UserError(f"item {item.id}: {len(item.choices)} choices is more than 26 letters")
    lines = [item.question.strip()]
    lines += [f"{LETTERS[i]}. {c}" for i, c in enumerate(item.choices)]
    return "\n".join(lines) + "\nAnswer:"


def _split_space(prompt: str, cont: str) -> tuple[str, str]:
    """lm-eval's convention: the whitespace between prompt and answer belongs to the answer.

    ``("A: ", "four") -> ("A:", " four")``; ``("Answer:", "four") -> ("Answer:", " four")``.
    """
    stripped = prompt.rstrip(" ")
    if stripped != prompt:
        return stripped, prompt[len(stripped):] + cont
    return prompt, cont if cont[:1].isspace() else " " + cont


def choice_logprobs(model, tok, prompts: Sequence[str], continuations: Sequence[str],
                    batch_size: int = 8) -> np.ndarray:
    """Summed log p(continuation tokens | prompt), float64 array of len(prompts).

    The context is encoded with the tokenizer's special tokens (BOS when it adds one), the
    continuation without; pairs are run longest first, right-padded, ``batch_size`` at a time.
    """
    import torch

    if len(prompts) != len(continuations):
        raise ValueError(f"{len(prompts)} prompts but {len(continuations)} continuations")
    device = next(model.parameters()).device
    seqs = []
    for p, c in zip(prompts, continuations, strict=True):
        ctx = tok(p)["input_ids"]
        cont = tok(c, add_special_tokens=False)["input_ids"]
        if not cont:
            raise UserError(f"continuation {c!r} encodes to no tokens")
        seqs.append((ctx, cont))
    out = np.zeros(len(seqs))
    order = sorted(range(len(seqs)), key=lambda i: -(len(seqs[i][0]) + len(seqs[i][1])))
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        full = [seqs[i][0] + seqs[i][1] for i in idx]
        width = max(len(f) for f in full)
        ids = torch.full((len(idx), width), pad, dtype=torch.long)
        mask = torch.zeros((len(idx), width), dtype=torch.long)
        for r, f in enumerate(full):
            ids[r, :len(f)] = torch.tensor(f)
            mask[r, :len(f)] = 1
        with torch.inference_mode():
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
        logp = torch.log_softmax(logits.float(), dim=-1)
        for r, i in enumerate(idx):
            ctx, cont = seqs[i]
            pos = torch.arange(len(ctx) - 1, len(ctx) + len(cont) - 1, device=logp.device)
            target = torch.tensor(cont, device=logp.device)
            out[i] = float(logp[r, pos, target].double().sum())
    return out


def _letter_logprobs(model, tok, items: Sequence[MCQItem], batch_size: int) -> np.ndarray:
    """log p(" A"), log p(" B"), … after each item's letter prompt, one forward per item."""
    letters = [tok(" " + LETTERS[i], add_special_tokens=False)["input_ids"]
               for i in range(max(len(it.choices) for it in items))]
    if any(len(ids) != 1 for ids in letters):
        # A tokenizer that splits " A": score each letter as a continuation instead.
        prompts = [letter_prompt(it) for it in items for _ in it.choices]
        conts = [" " + LETTERS[i] for it in items for i in range(len(it.choices))]
        return choice_logprobs(model, tok, prompts, conts, batch_size=batch_size)
    import torch

    device = next(model.parameters()).device
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    out = []
    for start in range(0, len(items), batch_size):
        chunk = items[start:start + batch_size]
        enc = [tok(letter_prompt(it))["input_ids"] for it in chunk]
        width = max(len(e) for e in enc)
        ids = torch.full((len(enc), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, e in enumerate(enc):
            ids[r, :len(e)] = torch.tensor(e)
            mask[r, :len(e)] = 1
        with torch.inference_mode():
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
        for r, (e, it) in enumerate(zip(enc, chunk, strict=True)):
            logp = torch.log_softmax(logits[r, len(e) - 1].float(), dim=-1).double()
            out.extend(float(logp[letters[i][0]]) for i in range(len(it.choices)))
    return np.array(out)


@dataclass
class MCQScores:
    """Per-item choice log-probs, predictions and correctness."""

    choice_logprobs: list[np.ndarray]
    pred: np.ndarray
    correct: np.ndarray

    @property
    def accuracy(self) -> float:
        return float(self.correct.mean()) if len(self.correct) else float("nan")


def score_mcq(model, tok, items: Sequence[MCQItem], method: str = "logprob",
              normalize: str = "none", batch_size: int = 8) -> MCQScores:
    """Zero-shot multiple-choice scoring of a causal LM (see the module docstring)."""
    if method not in ("logprob", "letter"):
        raise UserError(f"method must be 'logprob' or 'letter', got {method!r}")
    if normalize not in ("none", "length"):
        raise UserError(f"normalize must be 'none' or 'length', got {normalize!r}")
    if not items:
        raise UserError("score_mcq got no items")
    prompts, conts, owner = [], [], []
    if method == "letter":
        flat = _letter_logprobs(model, tok, items, batch_size)
        owner = [k for k, item in enumerate(items) for _ in item.choices]
    else:
        for k, item in enumerate(items):
            for c in item.choices:
                p, cc = _split_space(item.logprob_prompt(), c)
                prompts.append(p)
                conts.append(cc)
                owner.append(k)
        flat = choice_logprobs(model, tok, prompts, conts, batch_size=batch_size)
    owner_arr = np.array(owner)
    per_item, pred, correct = [], [], []
    for k, item in enumerate(items):
        lp = flat[owner_arr == k]
        if method == "logprob" and normalize == "length":
            lengths = np.array([max(1, len(c.encode())) for c in item.choices], dtype=float)
            lp = lp / lengths
        per_item.append(lp)
        p = int(np.argmax(lp))
        pred.append(p)
        correct.append(p in item.gold)
    return MCQScores(per_item, np.array(pred, dtype=int), np.array(correct, dtype=bool))
