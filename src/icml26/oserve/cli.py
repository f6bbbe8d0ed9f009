"""``icml26 oserve ...``: plan a heterogeneous deployment from a trace; simulate a plan."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(help="OServe: heterogeneous deployment plans and LP routing for LLM replicas.", no_args_is_help=True)


def _hw(name: str):
    from icml26.core.errors import UserError
    from icml26.sim.cost import HardwareSpec

    table = {"h100": HardwareSpec.h100, "h200": HardwareSpec.h200}
    if name.lower() not in table:
        raise UserError(f"--gpu must be one of {', '.join(table)}; got {name!r}")
    return table[name.lower()]()


PROFILE_HELP = ("measured iteration times, CSV with columns tp,pp,new_tokens,num_seqs,context_tokens,time_s "
                "(one row per timed engine step); rates come from it instead of the roofline, and only "
                "its layouts are searched")


def _profile(path: Path | None):
    if path is None:
        return None
    from icml26.oserve.capacity import Profile

    return Profile.from_csv(path)


def _setup(trace: Path, model_config: Path, nodes: int, gpus_per_node: int, gpu: str, k: int, seed: int):
    import numpy as np

    from icml26.oserve.capacity import Cluster
    from icml26.oserve.types import WorkloadTypes
    from icml26.sim.cost import ModelSpec
    from icml26.sim.trace import load_trace

    reqs = load_trace(trace)
    model = ModelSpec.from_hf_config(model_config)
    cluster = Cluster(nodes, gpus_per_node, _hw(gpu))
    types = WorkloadTypes(k, seed=seed).fit(reqs)
    span = max(r.arrival_s for r in reqs) - min(r.arrival_s for r in reqs)
    lam = np.bincount(types.assign(reqs), minlength=k) / max(span, 1e-9)
    return reqs, model, cluster, types, lam


@app.command()
def plan(trace: Path = typer.Option(..., help="Azure / BurstGPT / native CSV trace"),
         model_config: Path = typer.Option(..., help="HF config.json of the model"),
         model: str = typer.Option("MODEL", help="model name or path written into the launch scripts"),
         nodes: int = 1, gpus_per_node: int = 8, gpu: str = "h100", k: int = 4, seed: int = 0,
         patience: int = 20, out: Path = typer.Option(..., "-o", "--out", help="output folder"),
         profile: Path | None = typer.Option(None, help=PROFILE_HELP)):
    """Fit types, estimate per-type rates, search a deployment, write plan + launch scripts + router."""
    from icml26.oserve.launch import write_plan_dir
    from icml26.oserve.search import Scorer, best_homogeneous, search

    prof = _profile(profile)
    _, spec, cluster, types, lam = _setup(trace, model_config, nodes, gpus_per_node, gpu, k, seed)
    sc = Scorer(spec, cluster, types.mean_lengths_, lam, profile=prof)
    p = search(sc, patience=patience, seed=seed)
    h = best_homogeneous(sc)
    write_plan_dir(out, p, types, lam, model, {"best_homogeneous": h.describe(), "homogeneous_capacity_scale": h.score,
                                               "cost_model": f"profile {profile}" if prof else "roofline"})
    typer.echo(f"{p.describe()}: capacity x{p.score:.3f} of the trace's rate "
               f"(best homogeneous {h.describe()}: x{h.score:.3f}); wrote {out}")


@app.command()
def simulate(trace: Path = typer.Option(...), plan_dir: Path = typer.Option(..., "--plan"),
             model_config: Path = typer.Option(...), nodes: int = 1, gpus_per_node: int = 8, gpu: str = "h100",
             k: int = 4, seed: int = 0, profile: Path | None = typer.Option(None, help=PROFILE_HELP)):
    """Replay a trace through a written plan (LP weights) in icml26.sim; print latency stats."""
    import json

    import numpy as np

    from icml26.core.errors import UserError
    from icml26.oserve.capacity import ReplicaConfig, check_placement
    from icml26.oserve.claim import simulate_plan
    from icml26.oserve.router import WeightedTypeRouter
    from icml26.oserve.search import Plan

    reqs, spec, cluster, types, _ = _setup(trace, model_config, nodes, gpus_per_node, gpu, k, seed)
    f = plan_dir / "plan.json"
    if not f.is_file():
        raise UserError(f"no plan.json in {plan_dir}")
    d = json.loads(f.read_text())
    reps = [ReplicaConfig(int(r["tp"]), int(r["pp"]), tuple(int(g) for g in r["gpu_ids"])) for r in d["replicas"]]
    check_placement(reps, cluster, spec)
    x = np.array(d["x_req_s"], dtype=float)
    lab = dict(zip([r.id for r in reqs], types.assign(reqs), strict=True))
    s = simulate_plan(Plan(reps, d.get("capacity_scale", 0.0), x), spec, cluster, reqs,
                      WeightedTypeRouter(x, lambda r: lab[r.id]), profile=_profile(profile))
    for key in ("n", "e2e_p50", "e2e_p99", "ttft_p99", "throughput_tok_s"):
        typer.echo(f"{key}: {s[key]:.3f}")
