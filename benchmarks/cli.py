"""CPU seconds of the help commands: ``icml26 --help``, ``icml26 list``, ``icml26 NAME --help``.

Each command runs as a fresh process (the installed ``icml26`` script, so interpreter start-up and
every import count); its CPU time is user + sys of the child from ``resource.getrusage``
(``RUSAGE_CHILDREN`` deltas), median of ``--repeat`` runs (default 3). CPU seconds rather than
wall seconds because the 2-core benchmark machine is usually loaded by other jobs. Prints markdown
rows for benchmarks/RESULTS.md; the target is <= 0.5 CPU-s per command.

    python benchmarks/cli.py [--repeat N] [NAME ...]    # default: every method subcommand
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ICML26 = str(Path(sys.executable).with_name("icml26"))
TARGET = 0.5


def cpu_seconds(args: list[str], env: dict[str, str]) -> float:
    """user + sys CPU seconds of one ``icml26 ARGS`` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([ICML26, *args], check=True, env=env, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    from icml26.cli import METHOD_CLIS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="method subcommands (default: all)")
    parser.add_argument("--repeat", type=int, default=3)
    opts = parser.parse_args()
    env = {**os.environ, "COLUMNS": "100"}
    empty = tempfile.mkdtemp(prefix="icml26-cli-bench-")  # `list` reads no records
    commands = [["--help"], ["list", "--out", empty]]
    commands += [[name, "--help"] for name in (opts.names or METHOD_CLIS)]
    for args in commands:  # warm-up: byte-code caches written, files in the page cache
        cpu_seconds(args, env)
    print(f"median of {opts.repeat}, user+sys CPU-s of the whole process (load {os.getloadavg()[0]:.1f})")
    print()
    print("| command | CPU-s | ≤ 0.5 |")
    print("|---|---|---|")
    for args in commands:
        t = statistics.median(cpu_seconds(args, env) for _ in range(opts.repeat))
        shown = "icml26 list" if args[0] == "list" else "icml26 " + " ".join(args)
        print(f"| `{shown}` | {t:.2f} | {'yes' if t <= TARGET else 'no'} |")


if __name__ == "__main__":
    main()
