"""The cclrec claim's inputs: ML-100K (or the user's RecBole files), the split, item semantics,
user profiles (templated or cached SmolLM2), and the permuted-semantics control."""

from __future__ import annotations

import numpy as np

from icml26.cclrec.data import Interactions, load_interactions, ml100k_dir, split
from icml26.cclrec.profiles import PROFILE_TAG
from icml26.cclrec.semantics import (
    cached_encode,
    hash_encoder,
    item_semantics,
    item_table,
    user_profile_texts,
    user_table,
)
from icml26.core.claims import RunContext

__all__ = ["TINY_USERS", "prepare", "llm_profiles", "permuted_inputs"]

TINY_USERS = 150  # users of the tiny (CI) subset: the claim must stay under 60 CPU-s


def _subset_users(data: Interactions, n_users: int, seed: int) -> Interactions:
    """The interactions of ``n_users`` random users (tiny scale), items re-indexed densely."""
    rng = np.random.default_rng(seed)
    keep_u = np.sort(rng.choice(data.n_users, min(n_users, data.n_users), replace=False))
    mask = np.isin(data.users, keep_u)
    items_kept = np.unique(data.items[mask])
    umap = {u: k for k, u in enumerate(keep_u)}
    imap = np.full(data.n_items, -1)
    imap[items_kept] = np.arange(len(items_kept))
    return Interactions(
        users=np.array([umap[u] for u in data.users[mask]], np.int64),
        items=imap[data.items[mask]].astype(np.int64),
        ratings=None if data.ratings is None else data.ratings[mask],
        timestamps=None if data.timestamps is None else data.timestamps[mask],
        user_ids=tuple(data.user_ids[u] for u in keep_u),
        item_ids=tuple(data.item_ids[i] for i in items_kept),
    )


def prepare(ctx: RunContext):
    """Data, split, item semantics, per-attribute vectors and user profiles for this scale."""
    from icml26.core.lm import cache_root

    base = ml100k_dir()
    inter = ctx.options.get("inter", base / "ml-100k.inter")
    item = ctx.options.get("item", base / "ml-100k.item")
    user = ctx.options.get("user", base / "ml-100k.user")
    data = load_interactions(inter)
    if ctx.scale == "tiny":
        data = _subset_users(data, TINY_USERS, ctx.seed)
    sp_ = split(data, "user_time", (0.8, 0.1, 0.1), seed=ctx.seed)
    table = item_table(item, data.item_ids)
    # tiny (CI) uses a hashing bag-of-words encoder so it needs no model; small/full use MiniLM
    encode = hash_encoder(64) if ctx.scale == "tiny" else None
    cache = None if ctx.scale == "tiny" else cache_root() / "cclrec"
    sem, attrs = item_semantics(table, encode=encode, cache_dir=cache)
    try:
        users = user_table(user, data.user_ids)
    except Exception:  # noqa: BLE001 - a missing .user file only removes demographics
        users = None
    texts = user_profile_texts(sp_.train, table.get("genres", [""] * data.n_items), users)
    if encode is None:
        from icml26.core.embed import embed as encode
    prof = cached_encode(texts, encode, cache)
    info = {"semantics": "template"}
    mode = ctx.options.get("profiles", "template" if ctx.scale == "tiny" else "auto")
    if mode not in ("auto", "llm", "template"):
        raise ValueError(f"profiles must be auto|llm|template; got {mode!r}")
    if mode != "template" and cache is not None:
        llm = llm_profiles(ctx, data, sp_, table, users, cache, generate=mode == "llm")
        if llm["items"] is not None:
            p_emb = cached_encode(llm["items"], encode, cache)
            attrs = {**attrs, "llm_profile": p_emb}
            sem = _unit(np.mean([_unit(a) for a in attrs.values()], axis=0))
            info["semantics"] = "template + LLM item profiles"
            info["genre_agreement"] = llm["genre_agreement"]
        if llm["users"] is not None:
            prof = cached_encode(llm["users"], encode, cache)
            info["semantics"] += " + LLM user profiles"
        info["profile_seconds"] = llm["seconds"]
    return data, sp_, sem, attrs, prof, table, info


def _unit(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, np.float32)
    return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)


def llm_profiles(ctx, data, sp_, table, users, cache, generate: bool, max_new_tokens: int = 48):
    """SmolLM2 item and user profiles from the cache (``generate=True`` writes what is missing;
    otherwise a kind is used only when its cache is complete). Returns texts or None per kind."""
    import time as _time

    from icml26.cclrec.profiles import (
        _key,
        generate_profiles,
        genre_agreement,
        item_prompts,
        read_profiles,
        user_prompts,
    )

    out = {"items": None, "users": None, "genre_agreement": None, "seconds": 0.0}
    kinds = {
        "items": (item_prompts(table), data.item_ids, cache / "profiles-item.jsonl"),
        "users": (
            user_prompts(sp_.train, table, users),
            data.user_ids,
            cache / "profiles-user.jsonl",
        ),
    }
    chat = None
    for kind, (prompts, ids, path) in kinds.items():
        done = read_profiles(path)
        tag = ctx.options.get("profile_tag", PROFILE_TAG)
        have = [done.get(_key(tag, p, max_new_tokens)) for p in prompts]
        if all(h is not None for h in have):
            out[kind] = have
        elif generate:
            if chat is None:
                from icml26.core.chat import LocalChat

                chat = LocalChat(ctx.options.get("lm"), device=ctx.options.get("device", "cpu"))
            t0 = _time.perf_counter()
            out[kind] = generate_profiles(
                prompts,
                chat,
                path,
                ids=ids,
                tag=tag,
                max_new_tokens=max_new_tokens,
                batch_size=48,
                progress=ctx.progress,
            )
            out["seconds"] += _time.perf_counter() - t0
    if out["items"] is not None:
        out["genre_agreement"] = genre_agreement(out["items"], table.get("genres", []))
    return out


def permuted_inputs(sp_, sem, attrs, table, encode_users, seed):
    """Item semantics shuffled across items (and user profiles rebuilt from shuffled genres)."""
    perm = np.random.default_rng(10_000 + seed).permutation(len(sem))
    genres = table.get("genres", [""] * len(sem))
    texts = user_profile_texts(sp_.train, [genres[j] for j in perm], None)
    return sem[perm], {k: v[perm] for k, v in attrs.items()}, encode_users(texts)
