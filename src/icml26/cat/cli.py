"""``icml26 cat``: per-layer SQNR decomposition and CAT / baseline fake quantization of a HF LM.

Heavy imports (torch, transformers) happen inside the commands.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="CAT (concentration-alignment transforms): per-layer SQNR terms and W/A fake "
    "quantization with CAT, SmoothQuant or Hadamard transforms.",
    no_args_is_help=True,
)


class Transform(enum.StrEnum):
    cat = "cat"
    smoothquant = "smoothquant"
    hadamard = "hadamard"
    quarot = "quarot"
    none = "none"


ModelOpt = Annotated[
    str | None, typer.Option("--model", help="HF folder or .gguf (default: packaged SmolLM2).")
]
CalibOpt = Annotated[
    Path | None,
    typer.Option(
        "--calib", help="UTF-8 text file for calibration (default: Wikipedia train split)."
    ),
]


def _calibration(tok, calib: Path | None, n: int, seq_len: int, seed: int):
    import torch

    from icml26.core.errors import UserError
    from icml26.core.text import calibration_batches

    if calib is None:
        return calibration_batches(tok, n, seq_len, batch_size=4, seed=seed)
    if not calib.is_file():
        raise UserError(f"--calib {calib}: no such file")
    ids = tok(calib.read_text(encoding="utf-8"), return_tensors="pt").input_ids.reshape(-1)
    if ids.numel() < seq_len:
        raise UserError(f"--calib {calib}: {ids.numel()} tokens, fewer than --seq-len {seq_len}")
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, ids.numel() - seq_len + 1, (n,), generator=g).tolist()
    return list(torch.stack([ids[s : s + seq_len] for s in starts]).split(4))


def _is_q4_1(model: str | None) -> bool:
    return model is None or str(model).endswith(".gguf")


def _setup(model, dtype, device, calib, n_calib, seq_len, seed):
    from icml26.cat.model import collect_covariances
    from icml26.core.lm import load_lm
    from icml26.core.torchutil import check_device

    m, tok = load_lm(model, dtype=dtype, device=check_device(device))
    batches = _calibration(tok, calib, n_calib, seq_len, seed)
    return m, tok, collect_covariances(m, batches)


def _transforms(m, groups, transform, block, damp, alpha, seed):
    from icml26.cat.model import build_transforms

    kw = {
        "cat": {"block": None if block == 0 else block, "damp": damp},
        "smoothquant": {"alpha": alpha},
    }.get(transform, {})
    return build_transforms(m, groups, transform, seed=seed, **kw)


@app.command()
def sqnr(
    out: Annotated[Path, typer.Option("-o", "--out", help="CSV of per-layer terms.")],
    model: ModelOpt = None,
    calib: CalibOpt = None,
    n_calib: int = 32,
    seq_len: int = 256,
    eval_blocks: Annotated[int, typer.Option(help="Held-out 256-token validation blocks.")] = 8,
    w_bits: int = 4,
    a_bits: int = 4,
    block: Annotated[int, typer.Option(help="CAT block size; 0 = full.")] = 64,
    damp: float = 1e-3,
    dtype: str = "float32",
    device: str = "cpu",
    seed: int = 0,
    overwrite: bool = False,
) -> None:
    """Per-layer SQNR (dB) split into bits, concentration and alignment for RTN, SmoothQuant,
    Hadamard, QuaRot and CAT."""
    import csv
    import io

    from icml26.cat.model import layer_sqnr
    from icml26.cat.quarot import quarot_layer_transforms
    from icml26.core.errors import UserError
    from icml26.core.io import atomic_write_text
    from icml26.core.text import token_blocks

    if out.exists() and not overwrite:
        raise UserError(f"{out} exists; pass --overwrite to replace it")
    try:
        m, tok, groups = _setup(model, dtype, device, calib, n_calib, seq_len, seed)
        arms = {
            t: _transforms(m, groups, t, block, damp, 0.5, seed)
            for t in ("none", "smoothquant", "hadamard", "cat")
        }
        arms["quarot"] = quarot_layer_transforms(m, seed=seed)
        held = list(token_blocks(tok, "validation", 256, eval_blocks).split(4))
        rows = layer_sqnr(m, held, arms, w_bits, a_bits)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(out, buf.getvalue())
    typer.echo(f"wrote {len(rows)} rows to {out}")


@app.command()
def quantize(
    out: Annotated[Path, typer.Option("-o", "--out", help="Output folder (new).")],
    model: ModelOpt = None,
    transform: Transform = Transform.cat,
    calib: CalibOpt = None,
    n_calib: int = 32,
    seq_len: int = 256,
    w_bits: int = 4,
    a_bits: int = 4,
    w_group_size: Annotated[
        int | None, typer.Option(help="Weight groups (default per row).")
    ] = None,
    block: Annotated[int, typer.Option(help="CAT block size; 0 = full.")] = 64,
    damp: float = 1e-3,
    alpha: float = 0.5,
    dtype: str = "auto",
    device: str = "cpu",
    seed: int = 0,
    overwrite: bool = False,
    weights: Annotated[str, typer.Option(help="Weight quantizer: rtn or gptq.")] = "rtn",
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="cat (safetensors + cat-manifest.json, icml26 reloads it) or "
            "compressed-tensors (integer pack-quantized; --a-bits 16 = weight-only).",
        ),
    ] = "cat",
) -> None:
    """Quantize a model with a transform; write safetensors + cat-manifest.json that
    ``icml26.cat.model.load_quantized`` reads back (``load_quantized(OUT)`` loads the base
    model named in the manifest), or a compressed-tensors pack-quantized checkpoint
    (``--format compressed-tensors``) that transformers + compressed-tensors read."""
    from icml26.core.errors import UserError

    try:
        quantize_to_folder(
            out,
            model=model,
            transform=transform.value,
            calib=calib,
            n_calib=n_calib,
            seq_len=seq_len,
            w_bits=w_bits,
            a_bits=a_bits,
            w_group_size=w_group_size,
            block=block,
            damp=damp,
            alpha=alpha,
            dtype=dtype,
            device=device,
            seed=seed,
            overwrite=overwrite,
            weights=weights,
            fmt=fmt,
        )
    except (ValueError, FileExistsError) as exc:
        raise UserError(str(exc)) from None
    typer.echo(f"wrote {out}")


def quantize_to_folder(
    out: Path,
    *,
    model: str | None = None,
    transform: str = "cat",
    calib: Path | None = None,
    n_calib: int = 32,
    seq_len: int = 256,
    w_bits: int = 4,
    a_bits: int = 4,
    w_group_size: int | None = None,
    block: int = 64,
    damp: float = 1e-3,
    alpha: float = 0.5,
    dtype: str = "auto",
    device: str = "cpu",
    seed: int = 0,
    overwrite: bool = False,
    weights: str = "rtn",
    fmt: str = "cat",
):
    """What ``icml26 cat quantize`` does; returns the in-memory quantized model it wrote.
    ``weights``: ``"rtn"`` or ``"gptq"`` (Hessians from the calibration set); ``fmt``: ``"cat"``
    or ``"compressed-tensors"``; ``a_bits=16`` keeps activations in full precision.

    ``transform="quarot"`` rotates the residual stream (gains fused, head untied) and puts
    online Hadamards on o_proj/down_proj; the others are per-input-group transforms."""
    from icml26.cat.model import fake_quantize, save_quantized
    from icml26.cat.quarot import quarot_rotate_
    from icml26.core.errors import UserError

    out = Path(out)
    if out.exists() and not overwrite:
        raise UserError(f"{out} exists; pass --overwrite to replace it")
    if weights not in ("rtn", "gptq"):
        raise UserError(f"--weights must be rtn or gptq; got {weights!r}")
    if fmt not in ("cat", "compressed-tensors"):
        raise UserError(f"--format must be cat or compressed-tensors; got {fmt!r}")
    a_bits = None if a_bits == 16 else a_bits
    if w_group_size is not None and w_group_size <= 32 and _is_q4_1(model):
        raise UserError(
            f"--w-group-size {w_group_size}: this model's weights were dequantized from Q4_1 "
            "(groups of 32 along the input); a weight grid of groups <= 32 sits on that grid and "
            "flatters the result. Use per-channel weights (no --w-group-size) or groups > 32."
        )
    from icml26.core.lm import resolve_dtype

    dtype = str(resolve_dtype(dtype, device)).removeprefix("torch.")  # the manifest names it
    meta = {
        "model": model,
        "transform": transform,
        "block": block,
        "damp": damp,
        "alpha": alpha,
        "dtype": dtype,
        "seed": seed,
        "n_calib": n_calib,
        "seq_len": seq_len,
    }
    if transform == "quarot":
        from icml26.core.lm import load_lm
        from icml26.core.torchutil import check_device

        m, tok = load_lm(model, dtype=dtype, device=check_device(device))
        tr = quarot_rotate_(m, seed=seed)
        meta["residual_rotation"] = "quarot"
    else:
        m, tok, groups = _setup(model, dtype, device, calib, n_calib, seq_len, seed)
        tr = _transforms(m, groups, transform, block, damp, alpha, seed)
    hess = None
    if weights == "gptq":
        from icml26.cat.model import collect_covariances, group_hessians

        if transform == "quarot":  # the rotated model's own input statistics
            groups = collect_covariances(m, _calibration(tok, calib, n_calib, seq_len, seed))
        hess = group_hessians(groups)
    meta["weights"] = weights
    fake_quantize(
        m,
        w_bits,
        a_bits,
        w_gran="group" if w_group_size else "channel",
        w_group_size=w_group_size,
        transforms=tr,
        fuse=True,
        hessians=hess,
    )
    if fmt == "compressed-tensors":
        from icml26.cat.export import export_compressed_tensors

        export_compressed_tensors(m, out, transform, tokenizer=tok, overwrite=overwrite)
    else:
        save_quantized(m, out, meta, overwrite=overwrite)
    return m
