"""``icml26 quatro``: per-query trust-region duals and a small RLVR training run.

Only typer and the standard library are imported here; torch and the method load inside commands.
The loss is our reconstruction (``tr_dual``) of QUATRO; see docs/quatro.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="QUATRO (reconstruction, `tr_dual`): per-query KL trust-region duals and RL with "
    "verifiable rewards beside GRPO, DAPO, GSPO and KL-penalty baselines.",
    no_args_is_help=True,
)


@app.command("dual")
def dual_cmd(
    groups: Annotated[
        list[str], typer.Argument(help='Rewards of one group, comma-separated, e.g. "1,0,0,1".')
    ],
    delta: Annotated[
        float, typer.Option(help="Trust-region radius KL(pi||pi_old) in nats.")
    ] = 0.05,
) -> None:
    """Print lambda_x and the tilted weights exp(A/lambda) for each group of rewards."""
    import torch

    from icml26.core.errors import UserError
    from icml26.quatro.dual import solve_dual, tilt_kl

    for g in groups:
        try:
            r = torch.tensor([float(x) for x in g.split(",")], dtype=torch.float64)
        except ValueError:
            raise UserError(f"group {g!r}: expected comma-separated numbers") from None
        try:
            lam = solve_dual((r - r.mean())[None], delta)
        except ValueError as exc:
            raise UserError(f"group {g!r}: {exc}") from None
        a = r - r.mean()
        row = {"rewards": r.tolist(), "lambda": float(lam[0])}
        if lam[0] > 0:
            row["weights"] = [round(float(w), 4) for w in torch.softmax(a / lam[0], 0)]
            row["kl_to_uniform"] = float(tilt_kl(a[None], lam))
        typer.echo(json.dumps(row))


@app.command("train")
def train_cmd(
    method: Annotated[
        str, typer.Option(help="tr_dual, grpo, dapo, gspo or kl_penalty.")
    ] = "tr_dual",
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Folder for metrics.jsonl and checkpoint.pt.")
    ] = Path("quatro-run"),
    steps: Annotated[int, typer.Option(help="Rollout batches.")] = 40,
    mu: Annotated[int, typer.Option(help="Gradient steps per rollout batch (staleness).")] = 1,
    lr: Annotated[float, typer.Option(help="Adam learning rate.")] = 1e-4,
    delta: Annotated[float, typer.Option(help="tr_dual trust-region radius (nats).")] = 0.05,
    prompts: Annotated[int, typer.Option(help="Prompts per rollout batch.")] = 32,
    group_size: Annotated[int, typer.Option("--group-size", "-G", help="Samples per prompt.")] = 8,
    model: Annotated[
        str | None, typer.Option(help="HF model folder; default: a byte tiny_llama, SFT-warmed.")
    ] = None,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:1, ...")] = "cpu",
    seed: int = 0,
) -> None:
    """Train on generated arithmetic (add2 + chain3) with exact-match rewards; resumable from --out."""
    import torch

    from icml26.core.errors import UserError
    from icml26.core.torchutil import check_device
    from icml26.quatro.loop import RLConfig, RLLoop
    from icml26.quatro.losses import loss_config

    try:
        lc = loss_config(method, **({"delta": delta} if method == "tr_dual" else {}))
        cfg = RLConfig(steps=steps, prompts=prompts, group_size=group_size, mu=mu, lr=lr, seed=seed)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    dev = check_device(device)
    out.mkdir(parents=True, exist_ok=True)
    if model is None:
        from icml26.quatro.claim import warm_policy

        m, tok, info = warm_policy(64, 2, 600, seed, None)
        typer.echo(f"SFT warm start: {info}")
    else:
        from icml26.core.lm import load_lm

        m, tok = load_lm(model, dtype=torch.float32, device=dev)  # RL updates need fp32 weights
        if tok.pad_token_id is None:  # left padding needs a pad id; it is always masked out
            tok.pad_token = tok.eos_token
    m = m.to(dev)
    loop = RLLoop(
        m, tok, cfg, lc, metrics_path=out / "metrics.jsonl", checkpoint_path=out / "checkpoint.pt"
    )
    hist = loop.run()
    typer.echo(json.dumps(hist[-1]))
