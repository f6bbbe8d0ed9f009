"""``icml26 lems ...``: compress an HF causal LM to a parameter budget; inspect a result."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from icml26.core.errors import exit_on_user_error as _user_errors

app = typer.Typer(help="LEMS + KFAC-SVD: low-rank compression of an HF causal LM to a parameter "
                  "budget (fraction of linear weights kept).", no_args_is_help=True)


@app.command("compress")
def compress_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder (an HF model folder).")],
    model: Annotated[str, typer.Option(help="HF folder, .gguf file, or 'smollm2'.")] = "smollm2",
    ratio: Annotated[float, typer.Option(help="Fraction of linear weight parameters kept, (0, 1].")] = 0.8,
    decomposition: Annotated[str, typer.Option(help="kfac | svd_llm | svd | asvd | fwsvd")] = "kfac",
    allocator: Annotated[str, typer.Option(help="lems | uniform | energy (SVD-LLM v2) | atp (depth ramp)")] = "lems",
    left_factor: Annotated[str, typer.Option(help="KFAC output factor: transpose (L_G^T, the exact "
                                             "K-FAC error) | official (L_G, the paper's code) | "
                                             "identity (G = I)")] = "transpose",
    calib: Annotated[Path | None, typer.Option(help="UTF-8 text file for calibration (default: "
                                               "the packaged Wikipedia train split).")] = None,
    n_calib: Annotated[int, typer.Option(help="Calibration sequences.")] = 64,
    n_search: Annotated[int, typer.Option(help="LEMS search sequences.")] = 8,
    seq_len: Annotated[int, typer.Option(help="Tokens per sequence.")] = 256,
    trials: Annotated[int, typer.Option(help="Optuna trials of LEMS (0: alpha 0, gamma 5).")] = 10,
    n_startup_trials: Annotated[int | None, typer.Option(help="TPE's random start-up trials "
                                                         "(default Optuna's 10).")] = None,
    device: Annotated[str, typer.Option(help="torch device.")] = "cpu",
    dtype: Annotated[str, typer.Option(help="Dtype for statistics and search (bf16, fp32...; auto: bf16 only where native).")] = "auto",
    seed: Annotated[int, typer.Option(help="Calibration sampling seed.")] = 0,
    cache_dir: Annotated[Path | None, typer.Option(help="Where statistics and KLs are cached "
                                                   "(default under $XDG_CACHE_HOME/icml26/lems).")] = None,
    kl_offload: Annotated[str | None, typer.Option(help="Where LEMS keeps its reference "
                                                   "log-probs and block outputs: cpu, or a "
                                                   "directory (default: on --device).")] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace a non-empty OUT.")] = False,
) -> None:
    """Compress MODEL to RATIO and write a folder that AutoModelForCausalLM loads
    (trust_remote_code=True). Reruns resume from cached statistics and KLs."""
    with _user_errors():
        _compress(**locals())


def _calib_from_file(tok, path: Path, n: int, seq_len: int, seed: int):
    import torch

    from icml26.core.errors import UserError

    if not path.is_file():
        raise UserError(f"--calib {path}: no such file")
    ids = torch.tensor(tok(path.read_text(encoding="utf-8"), add_special_tokens=False)["input_ids"])
    if ids.numel() < n * seq_len:
        raise UserError(f"--calib {path} has {ids.numel()} tokens; {n} x {seq_len} = "
                        f"{n * seq_len} are needed (lower --n-calib or --seq-len)")
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, ids.numel() - seq_len + 1, (n,), generator=g)
    return list(torch.stack([ids[s : s + seq_len] for s in starts.tolist()]).split(4))


def _compress(out, model, ratio, decomposition, allocator, left_factor, calib, n_calib, n_search,
              seq_len, trials, n_startup_trials, device, dtype, seed, cache_dir, kl_offload,
              overwrite) -> None:
    import copy
    import hashlib
    import json

    import torch
    from rich.console import Console

    from icml26.core.errors import UserError
    from icml26.core.lm import cache_root, load_lm, resolve_dtype
    from icml26.core.text import calibration_batches
    from icml26.core.torchutil import check_device
    from icml26.lems.compress import CompressConfig, allocate
    from icml26.lems.export import apply_ranks_, count_linear_params, save_compressed
    from icml26.lems.factorize import factorize
    from icml26.lems.layers import target_layers
    from icml26.lems.lems import check_target, kept_fraction
    from icml26.lems.stats import collect_kfac_stats

    console = Console(stderr=True)
    cfg = CompressConfig(target=ratio, decomposition=decomposition, allocator=allocator,
                         left_factor=left_factor, trials=trials,
                         n_startup_trials=n_startup_trials, kl_offload=kl_offload)
    for name, value, low in (("--n-calib", n_calib, 1), ("--n-search", n_search, 1),
                             ("--seq-len", seq_len, 2)):
        if value < low:
            raise UserError(f"{name} must be >= {low}; got {value}")
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise UserError(f"output folder {out} is not empty; pass --overwrite")
    check_device(device)
    work_dtype = resolve_dtype(dtype, device)
    dtype = str(work_dtype).removeprefix("torch.")  # the cache key names the resolved dtype
    m32, tok = load_lm(None if model == "smollm2" else model, dtype=torch.float32, device=device)
    work = copy.deepcopy(m32).to(work_dtype) if work_dtype != torch.float32 else m32
    layers = target_layers(work)
    check_target(ratio, layers)
    if calib is None:
        batches = calibration_batches(tok, n_calib + n_search, seq_len, batch_size=4, seed=seed)
    else:
        batches = _calib_from_file(tok, calib, n_calib + n_search, seq_len, seed)
    flat = torch.cat(batches)
    calib_b, search_b = list(flat[:n_calib].split(4)), list(flat[n_calib:].split(4))
    key = hashlib.sha256(f"{model}|{calib}|{n_calib}|{n_search}|{seq_len}|{seed}|{dtype}".encode())
    cache = cache_dir or cache_root() / "lems" / f"cli-{key.hexdigest()[:12]}"
    console.print(f"{len(layers)} target layers; caching statistics in {cache}")
    stats = None
    if decomposition != "svd":
        stats = collect_kfac_stats(work, calib_b, layers=layers, cache=cache / "stats.safetensors")
    factors = factorize(m32, stats, decomposition, left_factor=left_factor, layers=layers,
                        compute_dtype=torch.float32)
    ranks = allocate(factors, work, ratio, allocator, search_batches=search_b, trials=trials,
                     n_startup_trials=n_startup_trials, layers=layers, kl_cache=cache / f"kl-{decomposition}-{left_factor}.json",
                     kl_offload=kl_offload)
    names = [lay.name for lay in layers]
    before = count_linear_params(m32, names)
    applied = apply_ranks_(m32, factors, ranks)
    after = count_linear_params(m32, names)
    m32.to(work_dtype)
    save_compressed(m32, tok, out, overwrite=overwrite, rank_dict=applied,
                    extra={"config": cfg.to_dict(), "kept_fraction": kept_fraction(layers, ranks)})
    console.print(json.dumps({"out": str(out), "kept_fraction": round(kept_fraction(layers, ranks), 5),
                              "linear_params_before": before, "linear_params_after": after,
                              "low_rank_layers": len(applied)}))


@app.command("show")
def show_cmd(path: Annotated[Path, typer.Argument(help="A folder written by `icml26 lems compress`.")]) -> None:
    """Print the per-layer ranks and the kept fraction of a compressed folder."""
    import json

    from icml26.core.errors import UserError

    with _user_errors():
        cfg_path = path / "config.json"
        if not cfg_path.is_file():
            raise UserError(f"{path} has no config.json")
        cfg = json.loads(cfg_path.read_text())
        if "rank_dict" not in cfg:
            raise UserError(f"{cfg_path} has no rank_dict: not written by icml26 lems")
        for name, r in cfg["rank_dict"].items():
            typer.echo(f"{name}\t{r}")
        meta = cfg.get("icml26_lems", {})
        if "kept_fraction" in meta:
            typer.echo(f"kept fraction: {meta['kept_fraction']:.5f}")
