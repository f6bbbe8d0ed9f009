"""``icml26 oserve ...``: plan a heterogeneous deployment from a trace; replay a trace through a plan."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(help="OServe: heterogeneous deployment plans and LP routing for LLM replicas.", no_args_is_help=True)

GPUS = ("h100", "h200")
MODEL_CONFIG_HELP = ("a packaged model (llama-2-13b, llama-2-70b, llama-3-8b, llama-3-70b, llama-30b) "
                     "or the path of an HF config.json")
PROFILE_HELP = ("measured iteration times, CSV with columns tp,pp,new_tokens,num_seqs,context_tokens,time_s "
                "(one row per timed engine step); rates come from it instead of the roofline, and only "
                "its layouts are searched")


def _hw(name: str):
    from icml26.core.errors import UserError
    from icml26.sim.cost import HardwareSpec

    table = {"h100": HardwareSpec.h100, "h200": HardwareSpec.h200}
    if name.lower() not in table:
        raise UserError(f"--gpu must be one of {', '.join(table)}; got {name!r}")
    return table[name.lower()]()


def _profile(path: Path | None):
    if path is None:
        return None
    from icml26.oserve.capacity import Profile

    return Profile.from_csv(path)


@app.command()
def plan(trace: Path = typer.Option(..., help="Azure / BurstGPT / native CSV trace"),
         model_config: str = typer.Option(..., help=MODEL_CONFIG_HELP),
         model: str = typer.Option(None, help="model name or path written into the launch scripts "
                                              "(default: the config's HF id)"),
         nodes: int = 1, gpus_per_node: int = 8, gpu: str = typer.Option("h100", help=" or ".join(GPUS)),
         k: int = typer.Option(4, "-k", "--k", help="number of request types (k-means)"),
         seed: int = 0, patience: int = 20, out: Path = typer.Option(..., "-o", "--out", help="output folder"),
         profile: Path | None = typer.Option(None, help=PROFILE_HELP)):
    """Fit types, estimate per-type rates, search a deployment; write plan.json, one launch script
    per node and engine (node-local GPU ids) and router.json (an input-only classifier)."""
    import numpy as np

    from icml26.core.errors import UserError
    from icml26.oserve.capacity import Cluster
    from icml26.oserve.launch import write_plan_dir
    from icml26.oserve.models import model_config as read_config
    from icml26.oserve.models import model_spec
    from icml26.oserve.search import Scorer, best_homogeneous, search
    from icml26.oserve.types import WorkloadTypes
    from icml26.sim.trace import load_trace

    if k < 1:
        raise UserError(f"-k must be >= 1 (request types); got {k}")
    if nodes < 1 or gpus_per_node < 1:
        raise UserError(f"--nodes and --gpus-per-node must be >= 1; got {nodes}, {gpus_per_node}")
    prof = _profile(profile)
    reqs = load_trace(trace)
    if len(reqs) < k:
        raise UserError(f"{trace}: {len(reqs)} requests cannot be split into -k {k} types")
    spec = model_spec(model_config)
    cluster = Cluster(nodes, gpus_per_node, _hw(gpu))
    types = WorkloadTypes(k, seed=seed).fit(reqs)
    span = max(r.arrival_s for r in reqs) - min(r.arrival_s for r in reqs)
    lam = np.bincount(types.assign(reqs), minlength=k) / max(span, 1e-9)
    sc = Scorer(spec, cluster, types.mean_lengths_, lam, profile=prof)
    p = search(sc, patience=patience, seed=seed)
    h = best_homogeneous(sc)
    name = model or read_config(model_config).get("_name_or_path") or "MODEL"
    write_plan_dir(out, p, types, lam, name,
                   {"best_homogeneous": h.describe(), "homogeneous_capacity_scale": h.score,
                    "cost_model": f"profile {profile}" if prof else "roofline", "model_config": model_config,
                    "nodes": nodes, "gpu": gpu, "trace": str(trace)},
                   gpus_per_node=gpus_per_node, nodes=nodes)
    typer.echo(f"{p.describe()}: capacity x{p.score:.3f} of the trace's rate "
               f"(best homogeneous {h.describe()}: x{h.score:.3f}); wrote {out} "
               f"({nodes} launch script(s) per engine, one per node)")


def _read_plan(plan_dir: Path) -> tuple[Path, dict]:
    import json

    from icml26.core.errors import UserError

    f = plan_dir / "plan.json"
    if not f.is_file():
        raise UserError(f"no plan.json in {plan_dir}")
    try:
        d = json.loads(f.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise UserError(f"{f}: not JSON ({exc.msg} at line {exc.lineno})") from None
    for key in ("replicas", "x_req_s", "types"):
        if key not in d:
            hint = " (written by an older icml26: run `icml26 oserve plan` again)" if key == "types" else ""
            raise UserError(f"{f}: missing field {key!r}{hint}")
    return f, d


@app.command()
def simulate(trace: Path = typer.Option(..., help="the trace to replay (may differ from the plan's)"),
             plan_dir: Path = typer.Option(..., "--plan", help="folder written by `oserve plan`"),
             model_config: str = typer.Option(None, help=MODEL_CONFIG_HELP + " (default: the plan's)"),
             nodes: int = typer.Option(None, help="default: the plan's"),
             gpus_per_node: int = typer.Option(None, help="default: the plan's"),
             gpu: str = typer.Option(None, help="h100 or h200 (default: the plan's)"),
             profile: Path | None = typer.Option(None, help=PROFILE_HELP)):
    """Replay a trace through a written plan in icml26.sim: the plan's replicas, LP weights and type
    classifier (never refitted on the replay trace), routed on prompt length only; print latency."""
    import numpy as np

    from icml26.core.errors import UserError
    from icml26.oserve.capacity import Cluster, ReplicaConfig, check_placement
    from icml26.oserve.models import model_spec
    from icml26.oserve.replay import simulate_plan
    from icml26.oserve.router import InputRouter
    from icml26.oserve.search import Plan
    from icml26.oserve.types import WorkloadTypes
    from icml26.sim.trace import load_trace

    f, d = _read_plan(plan_dir)
    model_config = model_config or d.get("model_config")
    if model_config is None:
        raise UserError(f"{f} names no model_config: pass --model-config")
    spec = model_spec(model_config)
    cluster = Cluster(nodes or int(d.get("nodes", 1)), gpus_per_node or int(d.get("gpus_per_node", 8)),
                      _hw(gpu or d.get("gpu", "h100")))
    try:
        types = WorkloadTypes.from_dict(d["types"])
    except (TypeError, ValueError) as exc:
        raise UserError(f"{f}: field 'types': {exc}") from None
    reps = []
    for i, r in enumerate(d["replicas"]):
        try:
            reps.append(ReplicaConfig(int(r["tp"]), int(r["pp"]), tuple(int(g) for g in r["gpu_ids"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"{f}: replica {i}: need integer fields tp, pp and gpu_ids ({exc})") from None
    try:
        check_placement(reps, cluster, spec)
    except UserError as exc:
        raise UserError(f"{f}: {exc}") from None
    x = np.asarray(d["x_req_s"], dtype=float)
    if x.shape != (len(reps), types.k):
        raise UserError(f"{f}: field 'x_req_s' has shape {x.shape}; expected ({len(reps)}, {types.k}) "
                        "(replicas x types)")
    reqs = load_trace(trace)
    s = simulate_plan(Plan(reps, d.get("capacity_scale", 0.0), x), spec, cluster, reqs, InputRouter(x, types),
                      profile=_profile(profile))
    counts = np.bincount(types.assign_input(reqs), minlength=types.k)
    typer.echo(f"{len(reqs)} requests; types by the plan's classifier (prompt length only): {counts.tolist()}")
    for key in ("n", "e2e_p50", "e2e_p99", "ttft_p50", "ttft_p99", "throughput_tok_s"):
        typer.echo(f"{key}: {s[key]:.3f}")
