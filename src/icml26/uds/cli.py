"""``icml26 uds ...``: online batch selection for supervised fine-tuning."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="UDS online batch selection for SFT (utility + diversity, no reference model).",
    no_args_is_help=True,
)


@app.callback()
def _group() -> None:
    """Online batch selection for supervised fine-tuning."""


LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@app.command()
def sft(
    data: Annotated[Path, typer.Option(help="JSONL: 'prompt'/'response' or 'messages' per line.")],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Output folder (model or adapter, selection log).")
    ],
    model: Annotated[
        str, typer.Option(help="HF folder, .gguf, 'smollm2' (packaged) or 'tiny' (from scratch).")
    ] = "smollm2",
    selector: Annotated[
        str, typer.Option(help="uds | uds-intra | uds-inter | random | maxloss | gradnorm | full")
    ] = "uds",
    budget: Annotated[
        float, typer.Option(help="Fraction K/b of each step's candidates trained on.")
    ] = 0.25,
    candidates: Annotated[int, typer.Option(help="b: candidates scored per optimizer step.")] = 32,
    epochs: int = 1,
    lr: Annotated[
        float, typer.Option(help="AdamW peak learning rate (official LoRA script: 1.5e-4).")
    ] = 1.5e-4,
    max_len: Annotated[int, typer.Option(help="Token cutoff; also the FJLT time length T.")] = 512,
    alpha: Annotated[float, typer.Option(help="UDS weight of the diversity term.")] = 2.5e-3,
    lora: Annotated[
        bool, typer.Option(help="LoRA r=8, alpha=16 on the 7 projections (needs peft).")
    ] = True,
    train_on_inputs: Annotated[
        bool, typer.Option(help="Also train on (and score) prompt tokens.")
    ] = False,
    device: str = "cpu",
    dtype: str = "fp32",
    seed: int = 0,
) -> None:
    """Fine-tune MODEL on DATA, keeping BUDGET of every step's candidates as chosen by SELECTOR."""
    from icml26.core.errors import UserError

    if not 0 < budget <= 1:
        raise UserError(f"--budget must be in (0, 1]; got {budget:g}")
    if not data.exists():
        raise UserError(f"--data {data}: no such file")
    import torch

    from icml26.core.io import atomic_write_json
    from icml26.core.lm import load_lm, tiny_llama
    from icml26.core.torchutil import check_device, parse_dtype
    from icml26.uds.loop import TrainConfig, encode, read_jsonl, train_online
    from icml26.uds.selectors import make_selector

    dev, dt = check_device(device), parse_dtype(dtype)
    torch.manual_seed(seed)
    examples = read_jsonl(data)
    if model == "tiny":
        net, tok = tiny_llama(128, 4, 4, max_len=max_len + 8, seed=seed, dtype=dt)
        net.to(dev)
    else:
        net, tok = load_lm(None if model == "smollm2" else model, dtype=dt, device=dev)
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    if lora:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError:
            raise UserError(
                "--lora needs the 'peft' package (pip install 'peft==0.21.2'), or pass --no-lora"
            ) from None
        targets = [t for t in LORA_TARGETS if any(n.endswith(t) for n, _ in net.named_modules())]
        if not targets:
            raise UserError(
                f"--lora: model {model} has none of the modules {', '.join(LORA_TARGETS)}"
            )
        net = get_peft_model(
            net,
            LoraConfig(
                r=8, lora_alpha=16, lora_dropout=0.0, target_modules=targets, task_type="CAUSAL_LM"
            ),
        )
    enc, skipped = encode(tok, examples, max_len, train_on_inputs)
    if not enc:
        raise UserError(
            f"{data}: every example's response is empty after truncation to {max_len} tokens"
        )
    sel = (
        None
        if selector == "full"
        else make_selector(
            selector,
            seed=seed,
            max_len=max_len,
            **({"alpha": alpha} if selector.startswith("uds") else {}),
        )
    )
    cfg = TrainConfig(
        lr=lr,
        candidates=min(candidates, len(enc)),
        budget=1.0 if sel is None else budget,
        epochs=epochs,
        seed=seed,
    )
    typer.echo(
        f"{len(enc)} examples ({skipped} skipped: empty response after truncation); selector {selector}, budget {cfg.budget}"
    )
    log = train_online(net, enc, sel, cfg, pad)
    out.mkdir(parents=True, exist_ok=True)
    net.save_pretrained(out)
    tok.save_pretrained(out)
    atomic_write_json(
        out / "uds_selection.json",
        {
            "selector": selector,
            "budget": cfg.budget,
            "candidates": cfg.candidates,
            "epochs": epochs,
            "lr": lr,
            "skipped": skipped,
            "selected": log.selected,
            "train_loss": log.train_loss,
            "time_scoring_s": log.time_scoring_s,
            "time_training_s": log.time_training_s,
        },
    )
    typer.echo(
        f"wrote {out} ({log.steps} steps, {len(log.selected)} samples trained; scoring {log.time_scoring_s:.1f} s, training {log.time_training_s:.1f} s)"
    )
