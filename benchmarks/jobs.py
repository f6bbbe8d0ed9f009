"""Job backends side by side: four tiny claims sequentially, with ``--jobs 2`` and with a local Ray.

Runs ``icml26 reproduce CLAIMS --scale tiny`` three times through the real CLI (fresh processes,
so imports and model loads count), checks that the records agree field by field (minus timings),
and prints the wall-clock ratios for benchmarks/RESULTS.md. Ray's start-up is timed separately.

    python benchmarks/jobs.py [claim ...]     # default: binarypc tie deepcommit smollm2-perplexity
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLAIMS = sys.argv[1:] or ["binarypc", "tie", "deepcommit", "smollm2-perplexity"]
ICML26 = str(Path(sys.executable).with_name("icml26"))


def reproduce(out: Path, jobs: str | None) -> float:
    cmd = [ICML26, "reproduce", *CLAIMS, "--scale", "tiny", "--out", str(out), "--no-report"]
    if jobs:
        cmd += ["--jobs", jobs]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ICML26_THREADS": "1"}
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def records(out: Path) -> dict:
    from icml26.core.jobs import comparable

    return {c: comparable(json.loads((out / c / "tiny.json").read_text())) for c in CLAIMS}


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="icml26-jobs-"))
    try:
        seq = reproduce(root / "seq", None)
        par = reproduce(root / "par", "2")
        ray_start = None
        try:
            import ray

            t0 = time.perf_counter()
            ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
            ray_start = time.perf_counter() - t0
            ray.shutdown()
            ray_t = reproduce(root / "ray", "ray")
        except ImportError:
            ray_t = None
        base = records(root / "seq")
        same_par = records(root / "par") == base
        same_ray = records(root / "ray") == base if ray_t else None
        print(f"claims: {' '.join(CLAIMS)} (tiny, 1 thread per claim)")
        print(f"sequential {seq:.1f} s; --jobs 2 {par:.1f} s (ratio {par / seq:.2f}); "
              f"identical records: {same_par}")
        if ray_t:
            print(f"--jobs ray {ray_t:.1f} s (ratio {ray_t / seq:.2f}; Ray start alone "
                  f"{ray_start:.1f} s); identical records: {same_ray}")
        for name in CLAIMS:
            a, b = base[name], records(root / "par")[name]
            if a != b:
                diff = [k for k in a if a.get(k) != b.get(k)]
                print(f"  {name}: differs in {diff}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
