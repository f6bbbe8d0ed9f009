"""``icml26 corrsteer …``: train and evaluate SAEs, select CorrSteer features, evaluate steering."""

from __future__ import annotations

import json
from pathlib import Path

import typer

app = typer.Typer(help="CorrSteer: SAEs for any HF decoder, and steering by the features that predict success.",
                  no_args_is_help=True)

_MODEL = typer.Option(None, "--model", help="HF model folder or .gguf (default: packaged SmolLM2)")
_DEVICE = typer.Option("cpu", "--device")
_DTYPE = typer.Option("auto", "--dtype", help="auto: bf16 on CUDA and on CPUs with native bf16, else float32")


def _lm(model, device, dtype):
    from icml26.core.lm import load_lm
    from icml26.core.torchutil import check_device

    return load_lm(model, dtype=dtype, device=check_device(device))


@app.command("train-sae")
def train_sae_cmd(out: Path = typer.Option(..., "-o", "--out", help="SAELens folder to write"),
                  layer: int = typer.Option(..., "--layer"), d_sae: int = 4096, k: int = 32,
                  arch: str = "topk", tokens: int = 200_000, epochs: int = 2, batch_size: int = 512,
                  lr: float = 5e-4, seq_len: int = 128, eval_tokens: int = 20_000, seed: int = 0,
                  model: str = _MODEL, device: str = _DEVICE, dtype: str = _DTYPE) -> None:
    """Harvest Wikipedia residuals at blocks.LAYER.hook_resid_pre, train an SAE, evaluate, save."""
    from icml26.core.text import token_blocks
    from icml26.corrsteer.sae import save_sae
    from icml26.corrsteer.train import TrainConfig, evaluate_sae, harvest, train_sae

    m, tok = _lm(model, device, dtype)
    cfg = TrainConfig(d_sae=d_sae, arch=arch, k=k, lr=lr, batch_size=batch_size, epochs=epochs, seed=seed)
    ids = token_blocks(tok, "train", seq_len, max(1, tokens // seq_len))
    x = harvest(m, ids, [layer])[layer]
    sae, stats = train_sae(x.to(device), cfg, layer=layer, model_name=str(model or "smollm2"),
                           checkpoint=out)
    vids = token_blocks(tok, "validation", seq_len, max(1, eval_tokens // seq_len))
    met = evaluate_sae(sae, harvest(m, vids, [layer])[layer].to(device), model=m, ids=vids[:16], layer=layer)
    save_sae(sae, out, extra={"metrics": met | stats})
    typer.echo(json.dumps(met | {"out": str(out)}, indent=1, default=str))


@app.command("eval-sae")
def eval_sae_cmd(sae_dir: Path, tokens: int = 20_000, seq_len: int = 128, model: str = _MODEL,
                 device: str = _DEVICE, dtype: str = _DTYPE) -> None:
    """MSE, explained variance, L0, dead fraction and loss recovered on held-out Wikipedia."""
    from icml26.core.errors import UserError
    from icml26.core.text import token_blocks
    from icml26.corrsteer.sae import load_sae
    from icml26.corrsteer.train import evaluate_sae, harvest

    sae = load_sae(sae_dir, device=device)
    m, tok = _lm(model, device, dtype)
    if sae.d_in != m.config.hidden_size:
        raise UserError(f"{sae_dir}: SAE d_in {sae.d_in} != model hidden size {m.config.hidden_size}")
    if sae.layer is None:
        raise UserError(f"{sae_dir}: cfg.json has no metadata.hook_name (blocks.L.hook_resid_pre)")
    vids = token_blocks(tok, "validation", seq_len, max(1, tokens // seq_len))
    x = harvest(m, vids, [sae.layer])[sae.layer].to(device)
    typer.echo(json.dumps(evaluate_sae(sae, x, model=m, ids=vids[:16]), indent=1))


def _items(tasks: str, n: int, seed: int):
    """Items of ``tasks`` (comma-separated; :func:`icml26.core.evalsets.load_named` names)."""
    from icml26.core.evalsets import load_named

    names = [t for t in tasks.split(",") if t]
    return [it for t in names for it in load_named(t, max_items=-(-n // max(1, len(names))), seed=seed)]


@app.command("select")
def select_cmd(sae_dir: list[Path] = typer.Option(..., "--sae", help="SAE folder (repeat per layer)"),
               tasks: str = typer.Option(..., help="comma-separated tasks: mmlu/<subject>, arc_easy, … or BIG-bench names (bigbench:NAME)"),
               n_train: int = 400, n_val: int = 100, strategy: str = "P", coef: str = "mean",
               seed: int = 0, out: Path = typer.Option(..., "-o", "--out", help="spec JSON to write"),
               model: str = _MODEL, device: str = _DEVICE, dtype: str = _DTYPE) -> None:
    """Correlate SAE features with letter-answer correctness and select features (S, A or P)."""
    import numpy as np

    from icml26.corrsteer.correlate import CorrelationAccumulator, check_rewards
    from icml26.corrsteer.experiment import score_systems, unsteered_pass
    from icml26.corrsteer.sae import load_sae
    from icml26.corrsteer.spec import save_spec
    from icml26.corrsteer.steer import select

    saes = {}
    for p in sae_dir:
        s = load_sae(p, device=device)
        saes[s.layer] = (s, p)
    m, tok = _lm(model, device, dtype)
    items = _items(tasks, n_train + n_val, seed)
    data = unsteered_pass(m, tok, items, sorted(saes), keep_cache=True)
    tr, va = np.arange(n_train), np.arange(n_train, len(items))
    y = data.correct[tr].astype(float)
    check_rewards(y)
    accs = {L: CorrelationAccumulator(s.d_sae).update(s.encode(data.resid[L][tr].to(device)).float().cpu(), y)
            for L, (s, _) in saes.items()}
    feats, info = select(accs, strategy, {L: s.W_dec.detach().cpu() for L, (s, _) in saes.items()},
                         validate=lambda systems: score_systems(m, data, va, systems).mean(1).tolist(),
                         coef_mode=coef)
    save_spec(out, feats, str(model or "smollm2"), {L: p for L, (_, p) in saes.items()})
    typer.echo(json.dumps({"train_acc": float(y.mean()), "features": [f.to_dict() for f in feats], **info},
                          indent=1, default=str))


@app.command("eval")
def eval_cmd(spec: Path, tasks: str = typer.Option(..., help="comma-separated tasks, as for select"), n: int = 300, seed: int = 1,
             force: bool = typer.Option(False, "--force", help="apply a spec made for another model"),
             model: str = _MODEL, device: str = _DEVICE, dtype: str = _DTYPE) -> None:
    """Letter-answer accuracy with and without the spec's steering; Δ and side-effect ratio."""
    import numpy as np

    from icml26.corrsteer.experiment import score_systems, unsteered_pass
    from icml26.corrsteer.spec import load_spec
    from icml26.corrsteer.steer import delta_accuracy, side_effect_ratio

    m, tok = _lm(model, device, dtype)
    feats = load_spec(spec, str(model or "smollm2"), hidden_size=m.config.hidden_size, force=force)
    data = unsteered_pass(m, tok, _items(tasks, n, seed), [], keep_cache=True)
    res = score_systems(m, data, np.arange(len(data.items)), [[], feats])
    typer.echo(json.dumps({"n": len(data.items), "unsteered_acc": float(res[0].mean()),
                           "steered_acc": float(res[1].mean()), "delta_acc": delta_accuracy(res[0], res[1]),
                           "side_effect_ratio": side_effect_ratio(res[0], res[1])}, indent=1))
