"""``icml26 cclrec ...``: train graph recommenders on RecBole atomic files or CSV; top-K lists."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="CCLRec and graph-recommender baselines on .inter/.item files or CSV (full ranking).",
    no_args_is_help=True,
)

MODELS = ("cclrec", "lightgcn", "sgl", "simgcl", "rlmrec", "mostpop")


@app.callback()
def _group() -> None:
    """Graph recommenders with item semantics; full-ranking metrics."""


@app.command()
def train(
    data: Annotated[
        Path, typer.Argument(help=".inter atomic file or CSV user,item[,rating,timestamp]")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output model folder.")],
    item: Annotated[
        Path | None, typer.Option(help=".item file (title/year/genres) for semantics.")
    ] = None,
    user: Annotated[Path | None, typer.Option(help=".user file for user profiles.")] = None,
    model: Annotated[str, typer.Option(help="|".join(MODELS))] = "cclrec",
    split_mode: Annotated[
        str, typer.Option("--split", help="user_time | global_time | random")
    ] = "user_time",
    passes: Annotated[int, typer.Option(help="Max passes over the training interactions.")] = 100,
    patience: Annotated[int, typer.Option(help="Early stop after this many passes w/o gain.")] = 20,
    lr: Annotated[float | None, typer.Option(help="Learning rate (default: the model's).")] = None,
    batch_size: Annotated[int, typer.Option(help="Users (CCLRec) or triplets per step.")] = 1024,
    dim: int = 64,
    encoder: Annotated[
        str, typer.Option(help="'minilm', a sentence-encoder folder, or 'hash'.")
    ] = "minilm",
    min_rating: Annotated[float | None, typer.Option(help="Drop rows rated below this.")] = None,
    device: str = "cpu",
    seed: int = 0,
) -> None:
    """Fit one model, print validation/test metrics, save it (safetensors + JSON)."""
    import json

    from icml26.cclrec import SGL, CCLRec, LightGCN, MostPop, RLMRecCon, SimGCL
    from icml26.cclrec.data import load_interactions, split
    from icml26.cclrec.semantics import (
        hash_encoder,
        item_semantics,
        item_table,
        user_profile_texts,
        user_table,
    )
    from icml26.core.errors import UserError
    from icml26.core.torchutil import check_device

    classes = dict(zip(MODELS, (CCLRec, LightGCN, SGL, SimGCL, RLMRecCon, MostPop), strict=True))
    if model not in classes:
        raise UserError(f"--model must be one of {', '.join(MODELS)}; got {model!r}")
    check_device(device)
    d = load_interactions(data, min_rating=min_rating)
    sp_ = split(d, split_mode, seed=seed)
    typer.echo(
        f"{d.n_users} users, {d.n_items} items, {len(d)} interactions "
        f"({d.n_duplicates} duplicates dropped, {sp_.n_dropped_users} short users dropped)"
    )
    cls = classes[model]
    sem, extras = None, {}
    if cls in (CCLRec, RLMRecCon):
        if item is None:
            raise UserError(f"--model {model} needs --item (item semantics)")
        if encoder == "hash":
            enc = hash_encoder(64)
        else:
            from icml26.core.embed import Embedder

            emb = Embedder(None if encoder == "minilm" else encoder, device=device)
            enc = emb.encode
        table = item_table(item, d.item_ids)
        sem, _ = item_semantics(table, encode=enc)
        users = user_table(user, d.user_ids) if user else None
        prof = enc(user_profile_texts(sp_.train, table.get("genres", [""] * d.n_items), users))
        extras = {"user_profiles": prof} if cls is CCLRec else {"user_semantics": prof}
    kw = (
        {}
        if cls is MostPop
        else dict(
            dim=dim,
            batch_size=batch_size,
            max_passes=passes,
            patience=patience,
            device=device,
            seed=seed,
        )
    )
    if lr is not None and cls is not MostPop:
        kw["lr"] = lr
    m = cls(**kw).fit(sp_.train, sem, sp_.val, **extras)
    ks = tuple(x for x in (10, 20, 50) if x <= d.n_items) or (d.n_items,)
    val = m.evaluate(sp_.val, ks=ks)
    test = m.evaluate(sp_.test, exclude=[sp_.train, sp_.val], ks=ks)
    m.save(
        out,
        extra={
            "user_ids": list(d.user_ids),
            "item_ids": list(d.item_ids),
            "params": m.params(),
            "val": val,
            "test": test,
        },
    )
    typer.echo(json.dumps({"val": val, "test": test}, indent=1, default=float))
    typer.echo(f"saved {out}")


@app.command()
def recommend(
    model_dir: Annotated[Path, typer.Argument(help="Folder written by `icml26 cclrec train`.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="CSV user,rank,item,score.")],
    users: Annotated[
        Path | None, typer.Option(help="File with one raw user id per line (default: all users).")
    ] = None,
    k: Annotated[int, typer.Option("-k", "--k", help="List length.")] = 20,
    device: str = "cpu",
) -> None:
    """Top-k unseen items for each user."""
    import io

    import numpy as np

    from icml26.cclrec.base import load
    from icml26.core.errors import UserError
    from icml26.core.io import atomic_write_text

    m = load(model_dir, device=device)
    uids = m.config.get("user_ids") or [str(i) for i in range(m.train_.shape[0])]
    iids = m.config.get("item_ids") or [str(i) for i in range(m.train_.shape[1])]
    index = {u: j for j, u in enumerate(uids)}
    if users is None:
        wanted = list(uids)
    else:
        if not users.is_file():
            raise UserError(f"{users}: no such file")
        wanted = [x.strip() for x in users.read_text(encoding="utf-8").splitlines() if x.strip()]
    unknown = [u for u in wanted if u not in index]
    if unknown:
        raise UserError(f"{len(unknown)} unknown users in {users}: {unknown[:5]}")
    dense = np.array([index[u] for u in wanted], dtype=np.int64)
    buf = io.StringIO()
    buf.write("user,rank,item,score\n")
    for s in range(0, len(dense), 1024):
        ub = dense[s : s + 1024]
        top = m.recommend(ub, k=k)
        sc = m.score(ub).detach().cpu().numpy()
        for r, u in enumerate(ub):
            for rank, i in enumerate(top[r], start=1):
                buf.write(f"{uids[u]},{rank},{iids[i]},{sc[r, i]:.6g}\n")
    atomic_write_text(out, buf.getvalue())
    typer.echo(f"wrote {len(dense)} x {k} recommendations to {out}")


@app.command()
def profiles(
    item: Annotated[Path, typer.Argument(help=".item file (title/year/genres).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="JSONL cache (appended, resumable).")],
    lm: Annotated[
        str,
        typer.Option(
            help="Chat model: 'local' (SmolLM2), 'local:PATH', or "
            "'http(s)://HOST/v1#MODEL' (OpenAI-compatible)."
        ),
    ] = "local",
    inter: Annotated[
        Path | None, typer.Option(help="With --inter: user profiles from the training split.")
    ] = None,
    user: Annotated[Path | None, typer.Option(help=".user file (demographics).")] = None,
    max_new_tokens: int = 48,
    batch_size: int = 48,
    device: str = "cpu",
    dtype: str = "auto",
) -> None:
    """Write LLM item profiles (or, with --inter, user profiles) to a resumable JSONL cache."""
    import time

    from icml26.cclrec.data import load_interactions, load_table, split
    from icml26.cclrec.profiles import (
        PROFILE_TAG,
        generate_profiles,
        genre_agreement,
        item_prompts,
        user_prompts,
    )
    from icml26.cclrec.semantics import item_table, user_table
    from icml26.core.chat import get_chat
    from icml26.core.errors import UserError

    if inter is None:
        header, rows = load_table(item)
        lower = [h.lower() for h in header]
        if "item_id" not in lower:
            raise UserError(f"{item}: no item_id column; header is {header}")
        ids = [r[lower.index("item_id")].strip() for r in rows]
        table = item_table(item, ids)
        prompts = item_prompts(table)
    else:
        d = load_interactions(inter)
        table = item_table(item, d.item_ids)
        users = user_table(user, d.user_ids) if user else None
        ids = list(d.user_ids)
        prompts = user_prompts(split(d, "user_time").train, table, users)
    from icml26.core.lm import resolve_dtype

    # "auto": bf16 on CUDA and native-bf16 CPUs, else float32 (resolved here, by name)
    chat = get_chat(lm, dtype=str(resolve_dtype(dtype, device)).removeprefix("torch."), device=device)
    t0 = time.perf_counter()
    texts = generate_profiles(
        prompts,
        chat,
        out,
        ids=ids,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        tag=PROFILE_TAG if lm in ("local", "local:smollm2") else None,
    )
    msg = f"{len(texts)} {'user' if inter else 'item'} profiles in {out} ({time.perf_counter() - t0:.0f} s)"
    if inter is None and "genres" in table:
        msg += f"; {genre_agreement(texts, table['genres']):.0%} name one of the item's genres"
    typer.echo(msg)
