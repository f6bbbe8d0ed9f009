"""``icml26 binarypc ...``: evaluate token selection on a real context; calibrate offline directions."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(
    help="BinaryPC: sparse decode attention from 64-bit binary-PC key codes.", no_args_is_help=True
)


@app.command("eval")
def eval_cmd(
    model: str = typer.Option(None, help="HF folder or .gguf (default: packaged SmolLM2)"),
    context: int = typer.Option(4096, help="context length (tokens of the Wikipedia test split)"),
    budget: float = typer.Option(0.02, help="share of the context attended (floor 128 tokens)"),
    positions: int = typer.Option(16, help="decode positions evaluated at the end of the context"),
    dtype: str = typer.Option("fp32"),
    device: str = typer.Option("cpu"),
    seed: int = typer.Option(0),
):
    """Attention-mass recall, oracle recall@k and output error of every method at one budget."""
    import numpy as np

    from icml26.binarypc.claim import evaluate_context
    from icml26.binarypc.patch import capture_qkv
    from icml26.core.errors import UserError
    from icml26.core.lm import load_lm
    from icml26.core.text import token_ids
    from icml26.core.torchutil import check_device, parse_dtype

    if not 0 < budget < 1:
        raise UserError(f"--budget must be in (0, 1); got {budget}")
    m, tok = load_lm(model, dtype=parse_dtype(dtype), device=check_device(device))
    max_pos = m.config.max_position_embeddings
    if context > max_pos or positions >= context:
        raise UserError(f"--context {context} must be <= {max_pos} and > --positions {positions}")
    ids = token_ids(tok, "test", max_tokens=context)
    if ids.numel() < context:
        raise UserError(f"the test split has only {ids.numel()} tokens; lower --context")
    qkv, _ = capture_qkv(m, ids.reshape(1, -1))
    qkv = [tuple(t.cpu() for t in x) for x in qkv]
    layers = list(range(2, m.config.num_hidden_layers))
    recs = evaluate_context(
        qkv, layers, positions, [budget], seed, scaling=m.model.layers[0].self_attn.scaling
    )
    typer.echo(f"{'method':32s} {'k':>5s} {'mass recall':>12s} {'recall@k':>9s} {'out err':>8s}")
    for label in dict.fromkeys(r["variant"] for r in recs):
        rs = [r for r in recs if r["variant"] == label]
        mean = {
            key: float(np.concatenate([r[key] for r in rs]).mean())
            for key in ("mass", "recall", "err")
        }
        typer.echo(
            f"{label:32s} {rs[0]['k']:5d} {mean['mass']:12.4f} {mean['recall']:9.4f} {mean['err']:8.4f}"
        )


@app.command("calibrate")
def calibrate_cmd(
    out: Path = typer.Option(..., "-o", "--out", help="output .safetensors (key 'directions')"),
    model: str = typer.Option(None, help="HF folder or .gguf (default: packaged SmolLM2)"),
    tokens: int = typer.Option(4096, help="calibration tokens (Wikipedia train split)"),
    bits: int = typer.Option(64),
    dtype: str = typer.Option("fp32"),
    device: str = typer.Option("cpu"),
    seed: int = typer.Option(0),
):
    """Offline directions (layers, KV heads, bits, head_dim) from calibration keys."""
    from safetensors.torch import save_file

    from icml26.binarypc.patch import calibrate
    from icml26.core.lm import load_lm
    from icml26.core.text import token_ids
    from icml26.core.torchutil import check_device, parse_dtype

    m, tok = load_lm(model, dtype=parse_dtype(dtype), device=check_device(device))
    seq = min(tokens, m.config.max_position_embeddings)
    ids = token_ids(tok, "train", max_tokens=tokens)
    chunks = [ids[i : i + seq] for i in range(0, ids.numel(), seq) if ids[i : i + seq].numel() > 1]
    V = calibrate(m, chunks, bits=bits, seed=seed)
    tmp = out.with_suffix(out.suffix + ".tmp")
    save_file({"directions": V.contiguous()}, str(tmp))
    tmp.replace(out)
    typer.echo(f"directions {tuple(V.shape)} -> {out}")
