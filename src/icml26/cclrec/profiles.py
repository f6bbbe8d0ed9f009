"""LLM-written user and item profiles (the paper's semantic input), cached and resumable.

Official CCLRec (after LLMRec) asks an LLM to write item attributes and a user profile, embeds the
text and feeds it to the semantic sampler and the side branches. Here any
:class:`icml26.core.chat.ChatModel` writes them: SmolLM2 through ``LocalChat`` (prompts are
decoded greedily in left-padded batches of ``batch_size``), an OpenAI-compatible endpoint, or a
``StubChat`` in tests.

Cache: one JSONL file per kind (``item`` / ``user``), one line ``{"key", "id", "text"}`` per
profile; ``key`` is a SHA-256 of the model tag, the decoding settings and the prompt, so a changed
prompt or model regenerates only what changed. Lines are appended after every batch (flushed and
fsynced), so an interrupted run resumes where it stopped; a torn last line is ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from icml26.core.errors import UserError

__all__ = [
    "PROFILE_TAG",
    "item_prompts",
    "user_prompts",
    "generate_profiles",
    "genre_agreement",
    "read_profiles",
]

# the cache key's model tag for SmolLM2 profiles (stable across machines and cache folders)
PROFILE_TAG = "smollm2-135m-instruct"
SYSTEM = "You are a film expert. Answer in at most two short sentences, with no preamble."


def item_prompts(table: dict[str, list[str]]) -> list[str]:
    """One prompt per item from its ``.item`` fields (title, year, genres where present)."""
    n = len(next(iter(table.values()))) if table else 0
    out = []
    for i in range(n):
        title = table.get("title", [""] * n)[i] or "an unknown movie"
        year = table.get("year", [""] * n)[i]
        genres = ", ".join(table.get("genres", [""] * n)[i].split())
        desc = (
            f"{title}" + (f" ({year})" if year else "") + (f", genres: {genres}" if genres else "")
        )
        out.append(
            f"Movie: {desc}. Describe this movie: its genre, themes, mood and the kind of viewer "
            "who would enjoy it."
        )
    return out


def user_prompts(
    train: sp.csr_matrix,
    table: dict[str, list[str]],
    user_fields: dict[str, list[str]] | None = None,
    n_titles: int = 10,
    timestamps: np.ndarray | None = None,
) -> list[str]:
    """One prompt per user: ``.user`` demographics plus up to ``n_titles`` training titles.

    ``timestamps`` (optional, same shape as ``train.data``) picks the most recent titles;
    without it the first ``n_titles`` in index order are listed. Train interactions only.
    """
    train = sp.csr_matrix(train)
    n_items = train.shape[1]
    titles = table.get("title", [f"item {i}" for i in range(n_items)])
    genres = table.get("genres", [""] * n_items)
    out = []
    for u in range(train.shape[0]):
        lo, hi = train.indptr[u], train.indptr[u + 1]
        items = train.indices[lo:hi]
        if timestamps is not None and hi > lo:
            items = items[np.argsort(-np.asarray(timestamps[lo:hi]), kind="stable")]
        listed = "; ".join(titles[i] for i in items[:n_titles]) or "nothing yet"
        counts: dict[str, int] = {}
        for i in items:
            for g in genres[i].split():
                counts[g] = counts.get(g, 0) + 1
        fav = ", ".join(sorted(counts, key=lambda g: (-counts[g], g))[:3])
        who = "A user"
        if user_fields:
            age = user_fields.get("age", [""] * (u + 1))[u]
            gender = {"M": "man", "F": "woman"}.get(user_fields.get("gender", [""] * (u + 1))[u])
            job = user_fields.get("occupation", [""] * (u + 1))[u]
            who = "A " + (f"{age}-year-old " if age else "") + (gender or "person")
            who += f" working as {job}" if job else ""
        out.append(
            f"{who} watched: {listed}."
            + (f" Most watched genres: {fav}." if fav else "")
            + " Describe this user's movie taste and what they would like to watch next."
        )
    return out


def _key(tag: str, prompt: str, max_new_tokens: int) -> str:
    return hashlib.sha256(json.dumps([tag, SYSTEM, prompt, max_new_tokens]).encode()).hexdigest()


def read_profiles(path: str | os.PathLike) -> dict[str, str]:
    """``{key: text}`` from a cache file; a torn (unparseable) line is skipped."""
    path = Path(path)
    out: dict[str, str] = {}
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
            out[rec["key"]] = rec["text"]
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
    return out


def _chat_tag(chat) -> str:
    m = getattr(chat, "model", None)
    name = getattr(getattr(m, "config", None), "_name_or_path", None) or getattr(m, "name", None)
    return f"{type(chat).__name__}:{Path(str(name)).name if name else 'model'}"


def _local_batch(chat, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
    """Greedy batched decoding for a ``LocalChat``: left-padded prompts, one ``generate``."""
    import torch

    tok = chat.tokenizer
    texts = [
        tok.apply_chat_template(
            [{"role": "system", "content": SYSTEM}, {"role": "user", "content": p}],
            add_generation_prompt=True,
            tokenize=False,
        )
        for p in prompts
    ]
    side = tok.padding_side
    tok.padding_side = "left"
    try:
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    finally:
        tok.padding_side = side
    enc = {k: v.to(chat.device) for k, v in enc.items()}
    with torch.inference_mode():
        out = chat.model.generate(
            **enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad
        )
    new = out[:, enc["input_ids"].shape[1] :]
    return [t.strip() for t in tok.batch_decode(new, skip_special_tokens=True)]


def generate_profiles(
    prompts: Sequence[str],
    chat,
    cache: str | os.PathLike | None,
    *,
    ids: Sequence[str] | None = None,
    max_new_tokens: int = 64,
    batch_size: int = 32,
    tag: str | None = None,
    progress=None,
) -> list[str]:
    """Profiles for ``prompts`` (one per user or item), reusing and extending ``cache`` (JSONL).

    ``chat``: a ``LocalChat`` (batched greedy decoding) or any ``ChatModel`` (one call per
    prompt, temperature 0). ``tag`` names the model in the cache key (default: the chat's class
    and model path). ``progress``: a ``RunContext.progress`` (optional).
    """
    from icml26.core.chat import LocalChat

    if max_new_tokens < 1 or batch_size < 1:
        raise UserError(
            f"need max_new_tokens >= 1 and batch_size >= 1; got {max_new_tokens}, {batch_size}"
        )
    prompts = list(prompts)
    ids = [str(i) for i in (ids if ids is not None else range(len(prompts)))]
    if len(ids) != len(prompts):
        raise UserError(f"{len(ids)} ids for {len(prompts)} prompts")
    tag = tag or _chat_tag(chat)
    keys = [_key(tag, p, max_new_tokens) for p in prompts]
    done = read_profiles(cache) if cache is not None else {}
    todo = [j for j, k in enumerate(keys) if k not in done]
    tick = progress.task("LLM profiles", len(todo)) if (progress and todo) else None
    fh = None
    if cache is not None and todo:
        Path(cache).parent.mkdir(parents=True, exist_ok=True)
        fh = open(cache, "a", encoding="utf-8")  # noqa: SIM115 - appended batch by batch
    try:
        for s in range(0, len(todo), batch_size):
            idx = todo[s : s + batch_size]
            batch = [prompts[j] for j in idx]
            if isinstance(chat, LocalChat):
                texts = _local_batch(chat, batch, max_new_tokens)
            else:
                texts = [
                    chat.chat(
                        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": p}],
                        max_new_tokens=max_new_tokens,
                        temperature=0.0,
                    ).strip()
                    for p in batch
                ]
            for j, t in zip(idx, texts, strict=True):
                done[keys[j]] = t
                if fh is not None:
                    fh.write(json.dumps({"key": keys[j], "id": ids[j], "text": t}) + "\n")
            if fh is not None:
                fh.flush()
                os.fsync(fh.fileno())
            if tick:
                tick(len(idx))
    finally:
        if fh is not None:
            fh.close()
    return [done[k] for k in keys]


def genre_agreement(profiles: Sequence[str], genres: Sequence[str]) -> float:
    """Share of items (with a genre) whose profile names at least one of their ``.item`` genres
    (case-insensitive; ``Sci-Fi`` also matches "science fiction", ``Children's`` "child")."""
    alias = {
        "sci-fi": ("sci-fi", "science fiction", "science-fiction"),
        "children's": ("child",),
        "film-noir": ("noir",),
    }
    hits, n = 0, 0
    for text, g in zip(profiles, genres, strict=False):
        gs = [x.lower() for x in str(g).split()]
        if not gs:
            continue
        n += 1
        t = text.lower()
        if any(any(a in t for a in alias.get(x, (x,))) for x in gs):
            hits += 1
    return hits / n if n else float("nan")
