"""``icml26 quartet2 ...``: NVFP4 quantizer errors of your own tensors."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Quartet II: NVFP4 simulation, MS-EDEN and quantizer-error reports.",
                  no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Quartet II: NVFP4 simulation, MS-EDEN and quantizer-error reports."""

@app.command("error")
def error(
    tensors: Annotated[Path, typer.Argument(help="A .safetensors file of 2-D (or N-D) tensors; "
                                                 "each is quantized along its last dim.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="CSV to write.")] = Path("errors.csv"),
    hadamard_dim: Annotated[int, typer.Option("--hadamard-dim", help="RHT size h (power of 2 >= 16).")] = 128,
    seed: Annotated[int, typer.Option(help="Seed of the rotation and the rounding noise.")] = 0,
) -> None:
    """Relative MSE and effective bits of each NVFP4 mode for every tensor in TENSORS.

    Modes: rtn, four_over_six, sr (override 17/16) and ms_eden, all after the same RHT; the last
    dim is zero-padded to a multiple of h. Writes one CSV row per tensor and mode.
    """
    import csv
    import io

    from icml26.core.errors import UserError
    from icml26.core.io import atomic_write_text

    if not tensors.is_file():
        raise UserError(f"{tensors}: no such file (expected a .safetensors file)")
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from icml26.quartet2.analysis import ERROR_MODES, effective_bits, quantizer_errors
    from icml26.quartet2.eden import check_hadamard_dim

    try:
        check_hadamard_dim(hadamard_dim)
    except ValueError as exc:
        raise UserError(f"--hadamard-dim: {exc}") from None
    try:
        data = load_file(str(tensors))
    except (SafetensorError, OSError, ValueError) as exc:
        raise UserError(f"{tensors}: cannot read as safetensors ({exc})") from None
    if not data:
        raise UserError(f"{tensors}: the file holds no tensors")
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["tensor", "shape", "mode", "relative_mse", "effective_bits"])
    for name, t in sorted(data.items()):
        if not t.is_floating_point() or t.dim() == 0:
            typer.echo(f"skipping {name}: not a floating-point tensor with a last dim", err=True)
            continue
        t = t.float().reshape(-1, t.shape[-1])
        if not bool(t.isfinite().all()):
            raise UserError(f"{tensors}: tensor {name!r} has NaN or inf values")
        if float(t.abs().max()) == 0:
            typer.echo(f"skipping {name}: all zeros", err=True)
            continue
        errs = quantizer_errors(t, hadamard_dim=hadamard_dim, seed=seed)
        for mode in ERROR_MODES:
            w.writerow([name, "x".join(map(str, data[name].shape)), mode,
                        f"{errs[mode]:.6g}", f"{effective_bits(errs[mode]):.4f}"])
        typer.echo(f"{name}: " + ", ".join(f"{m} {errs[m]:.3e}" for m in ERROR_MODES))
    atomic_write_text(out, buf.getvalue())
    typer.echo(f"wrote {out}")
