"""``icml26 tie ...``: sample output lengths, fit log-t per prompt, simulate scheduling policies."""

from __future__ import annotations

import json
from pathlib import Path

import typer

app = typer.Typer(help="TIE: log-t output-length distributions and tail-aware SJF scheduling.", no_args_is_help=True)

SIM_POLICIES = ("fcfs", "ssjf", "ltr", "sept", "tie", "oracle")


def _read_prompts(path: Path) -> list[str]:
    from icml26.core.errors import UserError

    if not path.is_file():
        raise UserError(f"prompts file not found: {path}")
    out = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            out.append(obj["prompt"] if isinstance(obj, dict) else str(obj))
        except (json.JSONDecodeError, KeyError):
            raise UserError(f"{path}: line {i}: expected a JSON object with a 'prompt' field") from None
    if not out:
        raise UserError(f"{path}: no prompts")
    return out


@app.command("sample-lengths")
def sample_lengths_cmd(
    prompts: Path = typer.Option(..., help="JSONL with one {'prompt': ...} per line"),
    out: Path = typer.Option(Path("lengths.json"), "-o", "--out", help="output JSON (resumable cache)"),
    model: str = typer.Option(None, help="HF folder or .gguf (default: packaged SmolLM2)"),
    n: int = typer.Option(12, help="completions per prompt"),
    cap: int = typer.Option(256, help="max new tokens (lengths at the cap are censored)"),
    batch_size: int = typer.Option(48),
    temperature: float = typer.Option(1.0),
    dtype: str = typer.Option("auto", help="auto: bf16 on CUDA and on CPUs with native bf16, else float32"),
    device: str = typer.Option("cpu"),
    seed: int = typer.Option(0),
):
    """Sample N completions per prompt and record their lengths (with batch refilling)."""
    from icml26.core.lm import load_lm
    from icml26.core.torchutil import check_device
    from icml26.tie.sampling import SampleConfig, sample_lengths

    texts = _read_prompts(prompts)
    m, tok = load_lm(model, dtype=dtype, device=check_device(device))
    res = sample_lengths(m, tok, texts, SampleConfig(n, cap, temperature, batch_size, seed=seed), cache_path=out)
    typer.echo(f"{len(res)} prompts x {n} samples -> {out}")


@app.command("fit")
def fit_cmd(
    lengths: Path = typer.Argument(..., help="JSON from sample-lengths"),
    out: Path = typer.Option(Path("fits.json"), "-o", "--out"),
    ks_boot: int = typer.Option(0, help="parametric-bootstrap KS replicates (0: skip KS)"),
    cap: int = typer.Option(None, help="the sampler's max new tokens: bootstrap replicates are censored there "
                                       "like the data (default: a prompt's smallest censored length, else none)"),
):
    """Fit log-t (nu=3.5 and free) and log-normal per prompt; optional KS tests."""
    import numpy as np

    from icml26.core.errors import UserError
    from icml26.core.io import atomic_write_json
    from icml26.tie.lengths import fit_lognormal, fit_logt, ks_test

    if not lengths.is_file():
        raise UserError(f"lengths file not found: {lengths}")
    if ks_boot < 0:
        raise UserError(f"--ks-boot must be >= 0; got {ks_boot}")
    if cap is not None and cap < 2:
        raise UserError(f"--cap must be >= 2 tokens; got {cap}")
    data = json.loads(lengths.read_text(encoding="utf-8"))
    res, passes = {}, {"logt": [], "logt_free": [], "lognormal": []}
    if not isinstance(data, dict):
        raise UserError(f"{lengths}: expected a JSON object {{prompt key: {{lengths, censored}}}}")
    for key, e in data.items():
        try:
            L, c = np.array(e["lengths"], dtype=float), np.array(e["censored"], dtype=bool)
        except (KeyError, TypeError, ValueError):
            raise UserError(f"{lengths}: prompt {key}: need 'lengths' (integers) and 'censored' (booleans)") from None
        if L.size < 2:
            raise UserError(f"{lengths}: prompt {key} has {L.size} samples; need >= 2")
        if cap is not None and L.max() > cap:
            raise UserError(f"{lengths}: prompt {key}: a length {int(L.max())} exceeds --cap {cap}")
        try:
            t, tf, ln = fit_logt(L, c), fit_logt(L, c, nu=None), fit_lognormal(L, c)
            r = {"mu": t.mu, "sigma": t.sigma, "free": [tf.mu, tf.sigma, tf.nu], "lognormal": [ln.mu, ln.sigma]}
            if ks_boot:
                for name, fam, nu in (("logt", "logt", 3.5), ("logt_free", "logt", None),
                                      ("lognormal", "lognormal", 3.5)):
                    _, p = ks_test(L, c, fam, nu, cap=cap, n_boot=ks_boot)
                    r[f"ks_p_{name}"] = p
                    passes[name].append(p > 0.05)
        except ValueError as exc:
            raise UserError(f"{lengths}: prompt {key}: {exc}") from None
        res[key] = r
    atomic_write_json(out, res)
    msg = f"{len(res)} prompts fitted -> {out}"
    if ks_boot:
        msg += "; KS pass rates " + ", ".join(f"{k} {np.mean(v):.1%}" for k, v in passes.items())
    typer.echo(msg)


@app.command("train")
def train_cmd(
    prompts: Path = typer.Option(..., help="JSONL prompts (the file given to sample-lengths)"),
    fits: Path = typer.Option(..., help="JSON from `tie fit`"),
    out: Path = typer.Option(Path("predictor.safetensors"), "-o", "--out"),
    model: str = typer.Option(None, help="frozen encoder: HF folder or .gguf (default: packaged SmolLM2)"),
    epochs: int = typer.Option(300),
    device: str = typer.Option("cpu"),
    seed: int = typer.Option(0),
):
    """Train TIE's (mu, sigma) heads on frozen-encoder features of the prompts."""
    import numpy as np
    import torch

    from icml26.core.errors import UserError
    from icml26.core.lm import load_lm
    from icml26.core.torchutil import check_device
    from icml26.tie.predictor import HeadConfig, LengthPredictor, encode_prompts
    from icml26.tie.sampling import prompt_key

    texts = _read_prompts(prompts)
    if not fits.is_file():
        raise UserError(f"fits file not found: {fits}")
    table = json.loads(fits.read_text(encoding="utf-8"))
    keep = [t for t in texts if prompt_key(t) in table]
    if len(keep) < 4:
        raise UserError(f"{fits}: only {len(keep)} of {len(texts)} prompts have fits; need >= 4")
    m, tok = load_lm(model, dtype=torch.float32, device=check_device(device))
    x = encode_prompts(keep, m, tok, device=device)
    mu = np.array([table[prompt_key(t)]["mu"] for t in keep])
    sigma = np.array([table[prompt_key(t)]["sigma"] for t in keep])
    LengthPredictor(HeadConfig(epochs=epochs, seed=seed)).fit(x, mu, sigma).save(out)
    typer.echo(f"trained on {len(keep)} prompts ({x.shape[1]}-d features) -> {out}")


def policy_scores(reqs, max_num_seqs: int, x_max: int) -> dict:
    """``{policy: (score(request, queue_len) -> float, aged)}`` for the simulate policies but FCFS,
    from each request's ``meta["mu"]``, ``meta["sigma"]`` (:func:`whatif_predictions`).

    ssjf: the predicted mean E[min(X, x_max)] (a regressor of the length learns the mean);
    ltr: the predicted median min(exp(mu), x_max) (a ranking model learns the order of the
    typical length, not its tail); sept / tie: TIE's score with beta = 0 / adaptive beta;
    oracle: the true length. Only sept and tie age (``aged``), as in the paper's baselines.
    """
    import numpy as np

    from icml26.tie.score import tie_score, truncated_mean

    mu = {r.id: r.meta["mu"] for r in reqs}
    sigma = {r.id: r.meta["sigma"] for r in reqs}
    ids = list(mu)
    mean = dict(zip(ids, truncated_mean(np.array([mu[i] for i in ids]), np.array([sigma[i] for i in ids]),
                                        x_max=x_max).tolist(), strict=True))
    return {
        "oracle": (lambda r, q: r.output_tokens, False),
        "ssjf": (lambda r, q: mean[r.id], False),
        "ltr": (lambda r, q: min(float(np.exp(mu[r.id])), x_max), False),
        "sept": (lambda r, q: tie_score(mu[r.id], sigma[r.id], q, max_num_seqs, x_max, beta=0), True),
        "tie": (lambda r, q: tie_score(mu[r.id], sigma[r.id], q, max_num_seqs, x_max), True),
    }


@app.command("simulate")
def simulate_cmd(
    trace: Path = typer.Option(..., help="Azure, BurstGPT or native CSV trace"),
    policy: str = typer.Option("tie", help=f"one of {', '.join(SIM_POLICIES)}"),
    max_num_seqs: int = typer.Option(32),
    x_max: int = typer.Option(2048, help="max_tokens cap used by the score"),
    pred_noise: float = typer.Option(0.5, help="what-if predictor: the typical sigma of a request's log-t length "
                                               "distribution, which the true length is one draw of"),
    sigma_spread: float = typer.Option(0.5, help="what-if predictor: sigma_i = pred_noise * exp(spread * N(0, 1)) "
                                                 "per request (0: one sigma for all)"),
    rate_scale: float = typer.Option(1.0, help="multiply the trace's arrival rate (arrival times are divided by it)"),
    model: str = typer.Option("llama3-8b", help="llama3-8b, llama3-70b or a path to an HF config.json"),
    gpu: str = typer.Option("h100", help="h100 or h200"),
    tp: int = typer.Option(1),
    limit: int = typer.Option(None, help="use only the first N requests"),
    seed: int = typer.Option(0),
):
    """Replay a trace through the simulated engine with one waiting-queue policy; print metrics.

    Traces carry no prompts, so predicted policies use a *what-if* predictor
    (:func:`icml26.tie.lengths.whatif_predictions`, documented in docs/tie.md): SSJF ranks by
    the predicted mean E[min(X, x_max)], LTR by the predicted median exp(mu) (the rank order a
    ranking model learns), both without aging; SEPT and TIE use TIE's score with aging (SEPT:
    beta = 0). FCFS and oracle (SJF on the true length) need no predictor.
    """
    import dataclasses

    import numpy as np

    from icml26.core.errors import UserError
    from icml26.sim import (
        Engine,
        EngineConfig,
        FCFSQueue,
        HardwareSpec,
        ModelSpec,
        RooflineCost,
        load_trace,
        simulate,
        summarize,
    )
    from icml26.tie.lengths import whatif_predictions
    from icml26.tie.queue import QueueConfig, TIEQueue

    if policy not in SIM_POLICIES:
        raise UserError(f"unknown policy {policy!r}; use one of {', '.join(SIM_POLICIES)}")
    if not pred_noise > 0:
        raise UserError(f"--pred-noise must be > 0; got {pred_noise}")
    if not sigma_spread >= 0:
        raise UserError(f"--sigma-spread must be >= 0; got {sigma_spread}")
    if not (rate_scale > 0 and np.isfinite(rate_scale)):
        raise UserError(f"--rate-scale must be > 0; got {rate_scale}")
    reqs, dropped = load_trace(trace, return_dropped=True, limit=limit)
    if rate_scale != 1.0:
        reqs = [dataclasses.replace(r, arrival_s=r.arrival_s / rate_scale) for r in reqs]
    specs = {"llama3-8b": ModelSpec.llama3_8b, "llama3-70b": ModelSpec.llama3_70b}
    spec = specs[model]() if model in specs else ModelSpec.from_hf_config(model)
    hws = {"h100": HardwareSpec.h100, "h200": HardwareSpec.h200}
    if gpu not in hws:
        raise UserError(f"unknown gpu {gpu!r}; use h100 or h200")
    cost = RooflineCost(spec, hws[gpu](), tp=tp)
    reqs = whatif_predictions(reqs, pred_noise, sigma_spread, seed=seed)
    scores = policy_scores(reqs, max_num_seqs, x_max)
    if policy == "fcfs":
        queue = FCFSQueue()
    else:
        fn, aged = scores[policy]
        queue = TIEQueue(fn, QueueConfig(x_max=x_max) if aged else QueueConfig(x_max=x_max, gamma=1.0))
    eng = Engine(EngineConfig(max_num_seqs=max_num_seqs, kv_tokens=cost.kv_capacity_tokens()), cost, queue)
    s = summarize(simulate(reqs, eng))
    span = max(r.arrival_s for r in reqs) - min(r.arrival_s for r in reqs)
    rate = f"{(len(reqs) - 1) / span:.3f} req/s" if span > 0 else "all at t=0"
    typer.echo(f"{len(reqs)} requests ({dropped} failed rows dropped; arrival rate {rate}, x{rate_scale:g}), "
               f"policy {policy}, {spec.name} on {tp}x{gpu}")
    for k in ("ptla_mean", "ptla_p50", "ptla_p90", "ptla_p99", "ttft_mean", "ttft_p50", "ttft_p99",
              "e2e_mean", "e2e_p50", "e2e_p99", "tpot_mean", "throughput_tok_s", "preemptions"):
        typer.echo(f"  {k:18s} {s.get(k, float('nan')):.4f}")
