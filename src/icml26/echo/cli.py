"""``icml26 echo ...``: speculative generation with ECHO trees, gate calibration, the modelled knee."""

from __future__ import annotations

import json
from pathlib import Path

import typer

app = typer.Typer(help="ECHO: budgeted elastic speculative decoding (tree drafts verified as one super-tree).",
                  no_args_is_help=True)


def _gates(spec: str | None, gates_file: Path | None):
    from icml26.core.errors import UserError

    if gates_file is not None:
        if not gates_file.is_file():
            raise UserError(f"gates file not found: {gates_file}")
        try:
            d = json.loads(gates_file.read_text(encoding="utf-8"))
            return tuple(int(x) for x in d["gate_depths"]), tuple(float(x) for x in d["taus"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise UserError(f"{gates_file}: expected JSON with 'gate_depths' and 'taus' lists") from None
    if not spec:
        return (2, 4), (0.3, 0.5)
    try:
        pairs = [p.split(":") for p in spec.split(",")]
        return tuple(int(d) for d, _ in pairs), tuple(float(t) for _, t in pairs)
    except ValueError:
        raise UserError(f"--gates must look like '2:0.3,4:0.5' (depth:tau,...); got {spec!r}") from None


@app.command("generate")
def generate_cmd(
    prompt: list[str] = typer.Option(..., "--prompt", "-p", help="a user prompt (repeat for a batch)"),
    model: str = typer.Option(None, help="HF folder or .gguf (default: packaged SmolLM2)"),
    draft: str = typer.Option(None, help="a separate same-tokenizer draft model (default: self-draft)"),
    exit_layer: int = typer.Option(None, help="self-draft layers (default: n_layers - 1)"),
    policy: str = typer.Option("echo", help="ar | static | sglang | dense | chain | echo"),
    k_max: int = typer.Option(64, help="batch verification budget (tokens)"),
    gates: str = typer.Option(None, help="ECHO gates 'depth:tau,...' (default 2:0.3,4:0.5)"),
    gates_file: Path = typer.Option(None, help="JSON from `icml26 echo calibrate`"),
    max_new_tokens: int = typer.Option(64),
    batch_size: int = typer.Option(None, help="concurrent requests (default: all prompts)"),
    dtype: str = typer.Option("auto", help="auto: bf16 on CUDA and on CPUs with native bf16, else float32"),
    device: str = typer.Option("cpu"),
    check: bool = typer.Option(False, help="also decode plainly and compare token for token"),
):
    """Generate greedily with speculative tree decoding; print texts and acceptance statistics."""
    import time

    from icml26.core.lm import load_lm
    from icml26.core.torchutil import check_device
    from icml26.echo.decode import SpeculativeDecoder
    from icml26.echo.experiment import chat_ids
    from icml26.echo.policies import AR, make_policy

    dev = check_device(device)
    m, tok = load_lm(model, dtype=dtype, device=dev)
    d = exit_layer if exit_layer is not None else m.config.num_hidden_layers - 1
    if draft:
        from icml26.echo.hf import check_tokenizers

        d, dtok = load_lm(draft, dtype=dtype, device=dev)
        try:
            check_tokenizers(tok, dtok)
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint="--draft") from None
    kw = {}
    if policy == "echo":
        kw["gate_depths"], kw["taus"] = _gates(gates, gates_file)
    pol = make_policy(policy, **kw)
    ids = [chat_ids(tok, p) for p in prompt]
    b = batch_size or len(ids)
    t0 = time.perf_counter()
    out = SpeculativeDecoder(m, d, pol, k_max).generate(ids, max_new_tokens, b, tok.eos_token_id)
    wall = time.perf_counter() - t0
    for p, toks in zip(prompt, out.tokens, strict=True):
        typer.echo(f"### {p}\n{tok.decode(toks, skip_special_tokens=True)}\n")
    n = sum(map(len, out.tokens))
    typer.echo(f"{pol.name}: {len(out.steps)} verify steps, MAT {out.mean_accepted:.2f} tokens/step, "
               f"verified/accepted {out.verified_per_accepted:.2f}, {n / wall:.1f} tokens/s wall")
    if check:
        import torch

        # the reference: transformers' own greedy generate, one prompt at a time (no padding)
        ref = []
        for p_ids in ids:
            g = m.generate(torch.tensor([p_ids], device=m.device), max_new_tokens=max_new_tokens, do_sample=False,
                           eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id if tok.pad_token_id is None
                           else tok.pad_token_id, attention_mask=torch.ones(1, len(p_ids), dtype=torch.long,
                                                                            device=m.device))
            ref.append(g[0, len(p_ids):].tolist())
        same = sum(a == r for a, r in zip(out.tokens, ref, strict=True))
        typer.echo(f"check: {same}/{len(ids)} outputs identical to transformers generate(do_sample=False)")
        if same != len(ids):
            ar = SpeculativeDecoder(m, 1, AR(), k_max=b, bucket=1).generate(ids, max_new_tokens, b, tok.eos_token_id)
            for i, (a, r) in enumerate(zip(out.tokens, ref, strict=True)):
                if a != r:
                    j = next((k for k, (x, y) in enumerate(zip(a, r, strict=False)) if x != y), min(len(a), len(r)))
                    typer.echo(f"  prompt {i}: first difference at new token {j}; identical to this "
                               f"decoder's AR: {a == ar.tokens[i]}")
            raise typer.Exit(1)


@app.command("calibrate")
def calibrate_cmd(
    out: Path = typer.Option(Path("echo_gates.json"), "-o", "--out"),
    model: str = typer.Option(None, help="HF folder or .gguf (default: packaged SmolLM2)"),
    exit_layer: int = typer.Option(None, help="self-draft layers (default: sweep for >= 50% agreement)"),
    prompts: int = typer.Option(8, help="warm-up prompts (packaged mix)"),
    max_new_tokens: int = typer.Option(48),
    depth: int = typer.Option(8),
    topk: int = typer.Option(10),
    auc_min: float = typer.Option(0.6),
    max_gates: int = typer.Option(2),
    dtype: str = typer.Option("auto", help="auto: bf16 on CUDA and on CPUs with native bf16, else float32"),
    seed: int = typer.Option(1),
):
    """Calibrate ECHO's gate depths and depth-wise thresholds on warm-up prompts (AUC per depth)."""
    from icml26.core.io import atomic_write_json
    from icml26.core.lm import load_lm
    from icml26.core.text import token_ids
    from icml26.echo.calibrate import calibrate_gates, gate_statistics
    from icml26.echo.draft import choose_exit_layer, exit_layer_agreement
    from icml26.echo.experiment import chat_ids, greedy_continuations
    from icml26.echo.model import TreeLM
    from icml26.echo.prompts import echo_prompts
    from icml26.echo.replay import ReplaySet, replay_positions

    m, tok = load_lm(model, dtype=dtype)
    lm = TreeLM(m)
    if exit_layer is None:
        ag = exit_layer_agreement(lm, token_ids(tok, "validation", max_tokens=256),
                                  range(max(1, lm.n_layers - 8), lm.n_layers))
        exit_layer = choose_exit_layer(ag)
    ids = [chat_ids(tok, t) for _, t in echo_prompts(prompts, seed=seed)]
    conts = greedy_continuations(lm, ids, max_new_tokens, 8, tok.eos_token_id)
    seqs = [p + c for p, c in zip(ids, conts, strict=True)]
    rs = ReplaySet(lm, exit_layer, seqs, [replay_positions(len(p), len(s), depth, 2) for p, s in zip(ids, seqs, strict=True)])
    rs.warm(topk, depth)
    conf, acc = gate_statistics(rs, list(range(len(rs))), topk, depth)
    cal = calibrate_gates(conf, acc, auc_min, max_gates)
    atomic_write_json(out, cal.to_dict() | {"exit_layer": exit_layer, "samples": len(rs)})
    typer.echo(json.dumps(cal.to_dict() | {"exit_layer": exit_layer}, indent=1))


@app.command("knee")
def knee_cmd(
    batch_sizes: str = typer.Option("1,8,32,128,256"),
    context: int = typer.Option(1024, help="cached tokens per request"),
):
    """The modelled verification knee (8B Llama-3 on one H100) per batch size."""
    from icml26.echo.cost import gpu_spec_cost

    c = gpu_spec_cost(context)
    for b in (int(x) for x in batch_sizes.split(",")):
        k = c.knee(b)
        typer.echo(f"B={b:4d}  T_ar={1e3 * k.t_ar:7.2f} ms  K_max={k.k_max:7.1f}  gamma={k.gamma:.5f}")
