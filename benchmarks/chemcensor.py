"""ChemCensor throughput: reactions/s per stage, 2 workers vs 1, DB lookup latency, RXNMapper.

Run: ``.venv/bin/python benchmarks/chemcensor.py [--n 2000] [--mapper] [--plot PATH]`` on an idle
machine. Generated reactions (templates on RDKit's bundled molecules) are timed through:
validation (parse + sanitise), processing after mapping (transform, skeleton, balance, stereo),
centre extraction (RC1..RC4 + FG signatures), and the DB lookup walk; then ``score_many`` with 1
and 2 worker processes; with ``--mapper`` the RXNMapper worker's reactions/s. Prints markdown
rows for benchmarks/RESULTS.md and saves a bar chart (default
results/benchmarks/chemcensor_stages.png; '' for none).

Targets (issue 19): 2 workers >= 1.7x one; 10k reactions scored in < 10 min; lookup in µs.

On a shared machine the wall ratio measures the machine, not the code: the 1- and 2-worker runs
are interleaved ``--repeats`` times, and the CPU time (this process plus its reaped children) is
reported beside the wall time. ``2 x cpu1 / cpu2`` is the speed-up two free cores would give if
the work stays CPU-bound (2.0 for a perfect split with no fork/IPC overhead); the 1-minute load
average is printed so a reader can judge the wall figures.
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from icml26.chemcensor import ChemCensor, ReactionDB  # noqa: E402
from icml26.chemcensor.centers import extract_centres  # noqa: E402
from icml26.chemcensor.data import generate, molecule_pool  # noqa: E402
from icml26.chemcensor.reaction import parse_side, process_mapped, split_reaction  # noqa: E402
from icml26.chemcensor.scorer import level_from_lookup  # noqa: E402


def _rate(fn, items) -> float:
    t0 = time.perf_counter()
    for x in items:
        fn(x)
    return len(items) / (time.perf_counter() - t0)


def _timed(fn) -> tuple[float, float]:
    """(wall s, CPU s of this process and its reaped children) of ``fn()``."""
    r0s, r0c = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    t0 = time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    r1s, r1c = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    cpu = sum(
        getattr(b, f) - getattr(a, f)
        for a, b in ((r0s, r1s), (r0c, r1c))
        for f in ("ru_utime", "ru_stime")
    )
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="reactions to score")
    ap.add_argument("--mapper", action="store_true", help="also time the RXNMapper worker")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved 1/2-worker repeats")
    ap.add_argument("--plot", default="results/benchmarks/chemcensor_stages.png")
    args = ap.parse_args()

    rx = [r.mapped for r in generate(molecule_pool(), 2 * args.n, seed=0)]
    db_rx, probe = rx[: len(rx) // 2], rx[len(rx) // 2 :][: args.n]
    t0 = time.perf_counter()
    db = ReactionDB.build(db_rx)
    build_s = time.perf_counter() - t0
    rows = [("DB build (full pipeline)", len(db_rx) / build_s, "rxn/s")]

    def validate(r):
        a, _, p = split_reaction(r)
        parse_side(a, "r"), parse_side(p, "p")

    rows.append(("validate (parse + sanitise)", _rate(validate, probe), "rxn/s"))
    rows.append(
        (
            "process (transform .. SEAr)",
            _rate(lambda r: process_mapped(*r.split(">>")), probe),
            "rxn/s",
        )
    )
    procs = [process_mapped(*r.split(">>")) for r in probe]
    rows.append(("centres RC1..RC4 + FG bits", _rate(extract_centres, procs), "rxn/s"))
    cents = [extract_centres(p) for p in procs]
    t0 = time.perf_counter()
    reps = 20
    for _ in range(reps):
        for c in cents:
            level_from_lookup(c, db)
    lookup_us = (time.perf_counter() - t0) / (reps * len(cents)) * 1e6
    rows.append(("DB lookup walk (RC1..RC4)", lookup_us, "µs/rxn"))
    cc = ChemCensor(db, mapper="given")
    walls: dict[int, list[float]] = {1: [], 2: []}
    cpus: dict[int, list[float]] = {1: [], 2: []}
    loads = [os.getloadavg()[0]]
    for _ in range(args.repeats):  # interleaved, so a load change hits both alike
        for jobs in (1, 2):
            w, c = _timed(lambda j=jobs: cc.score_many(probe, n_jobs=j))
            walls[jobs].append(w)
            cpus[jobs].append(c)
            loads.append(os.getloadavg()[0])
    one, two = min(walls[1]), min(walls[2])
    rows.append(("score_many, 1 worker (best wall)", len(probe) / one, "rxn/s"))
    rows.append(("score_many, 2 workers (best wall)", len(probe) / two, "rxn/s"))
    rows.append(("2 workers / 1 worker, wall", one / two, "x"))
    ratios = [a / b for a, b in zip(walls[1], walls[2], strict=True)]
    rows.append(("2 workers / 1 worker, wall, per repeat (min)", min(ratios), "x"))
    rows.append(("2 workers / 1 worker, wall, per repeat (max)", max(ratios), "x"))
    cpu1, cpu2 = min(cpus[1]), min(cpus[2])
    rows.append(("score_many CPU time per rxn, 1 worker", cpu1 / len(probe) * 1e3, "ms"))
    rows.append(("score_many CPU time per rxn, 2 workers (sum)", cpu2 / len(probe) * 1e3, "ms"))
    rows.append(("CPU-bound speed-up (2 x cpu1 / cpu2)", 2 * cpu1 / cpu2, "x"))
    rows.append(("projected 10k reactions, 2 workers", 10_000 * two / len(probe) / 60, "min"))
    rows.append(("1-min load average during the runs (max)", max(loads), "procs"))
    if args.mapper:
        from icml26.chemcensor.mapper import RXNMapperWorker, strip_maps

        plain = [strip_maps(r) for r in probe[:200]]
        with RXNMapperWorker(batch_size=16) as w:
            w.map(plain[:16])  # warm-up
            t0 = time.perf_counter()
            w.map(plain)
            rows.append(
                ("RXNMapper worker (batch 16)", len(plain) / (time.perf_counter() - t0), "rxn/s")
            )
    print("| measure | value | unit |\n|---|---|---|")
    for name, v, unit in rows:
        print(f"| {name} | {v:.3g} | {unit} |")
    if args.plot:
        from icml26.core.plots import pyplot, save_figure

        plt = pyplot()
        rate_rows = [r for r in rows if r[2] == "rxn/s"]
        fig, ax = plt.subplots(figsize=(7, 3.5))
        ax.barh([r[0] for r in rate_rows], [r[1] for r in rate_rows])
        ax.set_xscale("log")
        ax.set_xlabel("reactions / s (log)")
        ax.set_title(
            f"ChemCensor stages ({len(probe)} generated reactions; lookup {lookup_us:.1f} µs)"
        )
        fig.tight_layout()
        save_figure(fig, Path(args.plot))
        print(f"figure: {args.plot}")


if __name__ == "__main__":
    main()
