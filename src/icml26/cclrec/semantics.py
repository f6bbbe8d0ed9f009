"""Item and user semantics: attribute texts embedded by a sentence encoder (MiniLM by default).

Official CCLRec embeds LLM-generated item attributes and user profiles; here the attributes come
from the ``.item`` table (title, year, genres) and the user profile from the ``.user`` fields
plus the user's most frequent training genres. The item semantic vector is, as in the official
sampler, the L2-normalised mean of the per-attribute embeddings.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from icml26.core.errors import UserError

__all__ = [
    "item_table",
    "user_table",
    "item_attribute_texts",
    "item_semantics",
    "user_profile_texts",
    "cached_encode",
    "hash_encoder",
]

_FIELD_ALIASES = {
    "title": ("movie_title", "title", "name"),
    "year": ("release_year", "year"),
    "genres": ("class", "genre", "genres", "categories"),
}


def item_table(path: str | os.PathLike, item_ids: Sequence[str]) -> dict[str, list[str]]:
    """Read an ``.item`` file: ``{field: [value for each item id, in index order]}``.

    Fields are ``title``, ``year``, ``genres`` (aliases of RecBole's ``movie_title``,
    ``release_year``, ``class``); items missing from the file get empty strings.
    """
    from icml26.cclrec.data import load_table

    header, rows = load_table(path)
    lower = [h.lower() for h in header]
    if "item_id" not in lower:
        raise UserError(f"{path}: no item_id column; header is {header}")
    cid = lower.index("item_id")
    cols = {
        f: next((lower.index(a) for a in al if a in lower), None)
        for f, al in _FIELD_ALIASES.items()
    }
    if all(c is None for c in cols.values()):
        raise UserError(f"{path}: none of the fields {list(_FIELD_ALIASES)} found in {header}")
    by_id = {r[cid].strip(): r for r in rows if len(r) > cid}
    out: dict[str, list[str]] = {}
    for f, c in cols.items():
        if c is not None:
            out[f] = [
                by_id[i][c].strip() if i in by_id and len(by_id[i]) > c else "" for i in item_ids
            ]
    return out


def item_attribute_texts(
    table: dict[str, list[str]], fields=("title", "year", "genres")
) -> dict[str, list[str]]:
    """One short sentence per item and attribute, e.g. ``"Genres: Animation, Comedy."``."""
    fmt = {"title": "Title: {}.", "year": "Released in {}.", "genres": "Genres: {}."}
    out = {}
    for f in fields:
        if f not in table:
            raise UserError(f"item field {f!r} not in the item table (has {list(table)})")
        vals = table[f]
        if f == "genres":
            vals = [", ".join(v.split()) for v in vals]
        out[f] = [fmt[f].format(v) if v else f"Unknown {f}." for v in vals]
    return out


def cached_encode(
    texts: Sequence[str],
    encode: Callable[[list[str]], np.ndarray],
    cache_dir: str | os.PathLike | None,
    tag: str = "minilm",
) -> np.ndarray:
    """``encode(texts)`` (n, d) float32, cached as .npy keyed by a hash of ``tag`` and texts."""
    texts = list(texts)
    if cache_dir is None:
        return np.asarray(encode(texts), np.float32)
    h = hashlib.sha256(json.dumps([tag, texts]).encode()).hexdigest()[:20]
    path = Path(cache_dir) / f"{tag}-{h}.npy"
    if path.is_file():
        arr = np.load(path)
        if arr.shape[0] == len(texts):
            return arr
    arr = np.asarray(encode(texts), np.float32)
    from icml26.core.io import atomic_open

    with atomic_open(path, "wb") as f:
        np.save(f, arr)
    return arr


def item_semantics(
    table: dict[str, list[str]],
    fields=("title", "year", "genres"),
    encode: Callable[[list[str]], np.ndarray] | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Unit item vectors (I, d) float32 and the per-attribute embeddings {field: (I, d)}.

    ``encode`` defaults to ``icml26.core.embed.embed`` (MiniLM, 384-d, normalised).
    """
    if encode is None:
        from icml26.core.embed import embed as encode
    texts = item_attribute_texts(table, fields)
    attrs = {f: cached_encode(t, encode, cache_dir) for f, t in texts.items()}
    mean = np.mean(
        [a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12) for a in attrs.values()],
        axis=0,
    )
    sem = mean / np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12)
    return sem.astype(np.float32), attrs


def user_profile_texts(
    train: sp.csr_matrix,
    genres: Sequence[str],
    user_fields: dict[str, list[str]] | None = None,
    top: int = 3,
) -> list[str]:
    """A one-line profile per user: ``.user`` fields plus the ``top`` training genres.

    ``genres``: each item's space-separated genre string, by item index.
    """
    train = sp.csr_matrix(train)
    out = []
    for u in range(train.shape[0]):
        c = Counter(
            g
            for i in train.indices[train.indptr[u] : train.indptr[u + 1]]
            for g in genres[i].split()
        )
        fav = ", ".join(g for g, _ in c.most_common(top)) or "unknown"
        who = ""
        if user_fields:
            age, gender, job = (
                user_fields.get(k, [""] * (u + 1))[u] for k in ("age", "gender", "occupation")
            )
            who = f"A {age}-year-old {'man' if gender == 'M' else 'woman' if gender == 'F' else 'person'}"
            who += f" working as {job}. " if job else ". "
        out.append(f"{who}Mostly watches {fav} movies.")
    return out


def user_table(path: str | os.PathLike, user_ids: Sequence[str]) -> dict[str, list[str]]:
    """Read a ``.user`` file: ``{field: [value per user id]}`` (all columns but ``user_id``)."""
    from icml26.cclrec.data import load_table

    header, rows = load_table(path)
    lower = [h.lower() for h in header]
    if "user_id" not in lower:
        raise UserError(f"{path}: no user_id column; header is {header}")
    cu = lower.index("user_id")
    by_id = {r[cu].strip(): r for r in rows if len(r) > cu}
    return {
        h: [by_id[u][j].strip() if u in by_id and len(by_id[u]) > j else "" for u in user_ids]
        for j, h in enumerate(lower)
        if j != cu
    }


def hash_encoder(dim: int = 64) -> Callable[[list[str]], np.ndarray]:
    """A model-free text encoder: signed feature hashing of lower-cased words, unit rows.

    For tests and the tiny CI claim; texts sharing words get positive cosine.
    """
    import re
    import zlib

    def encode(texts):
        out = np.zeros((len(texts), dim), np.float32)
        for r, t in enumerate(texts):
            for w in re.findall(r"[a-z0-9']+", str(t).lower()):
                h = zlib.crc32(w.encode())
                out[r, h % dim] += 1.0 if (h >> 16) & 1 else -1.0
        n = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(n > 0, n, 1.0)

    return encode
