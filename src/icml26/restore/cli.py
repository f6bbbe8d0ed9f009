"""``icml26 restore``: evaluate LLaVA models with visual token reduction +/- RESTORE; build the
claim's tiny LLaVA and its generated VQA data.

Only typer and the standard library are imported here; torch and the method load inside commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="RESTORE: visual token reduction with retained positions, size + RoPE-distance attention "
    "calibration and distinctive-anchor merging, for HF LLaVA models.",
    no_args_is_help=True,
)


@app.command("eval")
def eval_cmd(
    model: Annotated[
        Path,
        typer.Option("--model", help="HF LLaVA / LLaVA-NeXT folder (or the scenes tiny LLaVA)."),
    ],
    data: Annotated[Path, typer.Option("--data", help="JSONL lines {image, question, answers}.")],
    reducer: Annotated[
        str, typer.Option(help="divprune | visionzip | tome | uniform | fastv | pdrop | none")
    ] = "divprune",
    keep: Annotated[int, typer.Option(help="Visual tokens kept per image.")] = 64,
    restore: Annotated[
        bool,
        typer.Option(
            "--restore/--no-restore",
            help="RESTORE on (hybrid + positions + calibration) or the plain reducer.",
        ),
    ] = True,
    gamma: Annotated[
        float, typer.Option(help="Hybrid split: fraction of the budget kept by the base pruner.")
    ] = 0.5,
    c: Annotated[float, typer.Option(help="Calibration constant c (> 1).")] = 2.0,
    full: Annotated[
        bool, typer.Option("--full", help="Also evaluate the unreduced model.")
    ] = False,
    limit: Annotated[int | None, typer.Option(help="First N records only.")] = None,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:1 ...")] = "cpu",
    dtype: Annotated[str, typer.Option(help="float32, bfloat16, float16")] = "float32",
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write the result JSON here.")
    ] = None,
) -> None:
    """Accuracy of a LLaVA model on a VQA JSONL with the chosen reducer, with or without RESTORE."""
    from icml26.core.io import atomic_write_json
    from icml26.core.torchutil import check_device, parse_dtype
    from icml26.restore.patch import IN_LLM, RestoreConfig
    from icml26.restore.vqa import eval_vqa

    in_llm = reducer in IN_LLM
    if restore and not in_llm and reducer != "none":
        gm = gamma if reducer != "tome" else None
        cfg = RestoreConfig(reducer=reducer, keep=keep, gamma=gm, c=c)
    else:
        cfg = RestoreConfig(
            reducer=reducer,
            keep=keep,
            gamma=None,
            calibrate=False,
            positions="retained" if in_llm else "reindexed",
        )
    dev, dt = check_device(device), parse_dtype(dtype)
    results = {"reduced": eval_vqa(model, data, cfg, device=dev, dtype=dt, limit=limit)}
    if full:
        results["full"] = eval_vqa(model, data, None, device=dev, dtype=dt, limit=limit)
    for name, r in results.items():
        typer.echo(f"{name}: accuracy {r['accuracy']:.4f} on {r['n']} questions")
    if out:
        atomic_write_json(out, results)


@app.command("build")
def build_cmd(
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Folder (default: the icml26 cache).")
    ] = None,
    vision_steps: Annotated[
        int | None,
        typer.Option(
            help="Stage 1 steps: vision tower on attribute labels (default: the claim's recipe)."
        ),
    ] = None,
    qa_steps: Annotated[
        int | None,
        typer.Option(
            help="Stage 2 steps: projector + LM on scenes QA (default: the claim's recipe)."
        ),
    ] = None,
    seed: Annotated[int, typer.Option()] = 0,
    lm: Annotated[
        str,
        typer.Option(
            help="Language model: tiny (3-layer, from scratch) or smollm2 (frozen SmolLM2-135M; 2.2-3 CPU-hours)."
        ),
    ] = "tiny",
) -> None:
    """Train the claim's tiny LLaVA on generated scenes QA and save it (from_pretrained-loadable)."""
    from icml26.restore.train import LMS, QA_STEPS, VISION_STEPS, build_tiny_llava

    if lm not in LMS:
        raise typer.BadParameter(f"--lm must be one of {', '.join(LMS)}; got {lm!r}")
    path = build_tiny_llava(
        out,
        vision_steps=VISION_STEPS if vision_steps is None else vision_steps,
        qa_steps=QA_STEPS if qa_steps is None else qa_steps,
        seed=seed,
        lm=lm,
        log=typer.echo,
    )
    typer.echo(str(path))


@app.command("make-data")
def make_data_cmd(
    out: Annotated[Path, typer.Argument(help="Folder for PNGs + vqa.jsonl.")],
    scenes: Annotated[int, typer.Option(help="Number of scenes (about 4 questions each).")] = 50,
    seed: Annotated[int, typer.Option()] = 123,
) -> None:
    """Write held-out generated scenes and their questions as a VQA JSONL."""
    from icml26.restore.vqa import write_scenes_jsonl

    typer.echo(str(write_scenes_jsonl(out, scenes, seed)))


@app.command("reduce")
def reduce_cmd(
    n: Annotated[int, typer.Option(help="Tokens (random features) to reduce.")] = 576,
    keep: Annotated[int, typer.Option()] = 64,
    reducer: Annotated[str, typer.Option()] = "divprune",
    gamma: Annotated[
        float | None, typer.Option(help="Hybrid split (omit for the plain reducer).")
    ] = None,
    seed: Annotated[int, typer.Option()] = 0,
) -> None:
    """Reduce random features and print sizes / positions (a quick look at a reducer)."""
    import torch

    from icml26.restore.anchors import Hybrid
    from icml26.restore.reducers import get_reducer

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 64, generator=g)
    base = get_reducer(reducer)
    red = (Hybrid(base, gamma) if gamma is not None else base).reduce(
        x, keep, torch.rand(n, generator=g)
    )
    typer.echo(json.dumps({"sizes": red.sizes.tolist(), "positions": red.positions().tolist()}))
