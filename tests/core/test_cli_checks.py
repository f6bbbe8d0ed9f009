"""Every method subcommand refuses a bad number, device or path while parsing (issue 40).

The test walks every command of every method CLI (as `icml26 NAME ...` loads it), gives the
required options valid dummy values and one option a bad value, and asserts exit 2, a message
naming the option and no traceback. The command bodies are replaced by a function that fails
the test, so a value that is not rejected up front shows as "the command ran" (and no model is
ever loaded: the whole walk takes a few CPU-seconds).
"""

from __future__ import annotations

import pytest
import typer
import typer.testing
from typer.testing import CliRunner

from icml26 import cli_checks
from icml26.cli import METHOD_CLIS, app
from icml26.cli_checks import PATHS, numeric_kind, range_for


class _BodyRan(Exception):
    pass


def _no_body(*args, **kwargs):
    raise _BodyRan("the command body ran: the bad value was not rejected while parsing")


def _leaves(cmd, path):
    subs = getattr(cmd, "commands", None)
    if subs is None:
        yield path, cmd
        return
    for name, sub in subs.items():
        yield from _leaves(sub, f"{path} {name}")


@pytest.fixture(scope="module")
def root():
    group = typer.main.get_command(app)
    ctx = typer.Context(group)
    commands = {}
    for name in METHOD_CLIS:
        for path, leaf in _leaves(group.get_command(ctx, name), name):
            leaf.callback = _no_body
            commands[path] = leaf
    return group, commands


@pytest.fixture
def invoke(root, monkeypatch, tmp_path):
    group, _ = root
    monkeypatch.setattr(typer.testing, "_get_command", lambda _app: group)
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()

    def run(args):
        return runner.invoke(app, args)

    return run


def _dummy(path, param, tmp_path):
    """A valid value for ``param`` (a required one)."""
    kind = PATHS.get(path, {}).get(param.name)
    if kind == "in_file":
        f = tmp_path / f"in_{param.name}.csv"
        f.write_text("a\n1\n")
        return str(f)
    if kind == "in_dir":
        d = tmp_path / f"in_{param.name}"
        d.mkdir(exist_ok=True)
        return str(d)
    if kind == "out_file":
        return str(tmp_path / f"out_{param.name}.json")
    if kind == "out_dir":
        return str(tmp_path / f"out_{param.name}")
    rng = range_for(path, param)
    if rng is not None:
        return str(int(rng.lo) + (1 if rng.lo_open else 0) if rng.lo is not None else 1)
    return "x"


def _args(path, leaf, tmp_path, skip):
    """The command line with every required parameter (but ``skip``) given a valid value."""
    words = path.split()
    positional, options = [], []
    for p in leaf.params:
        if not p.required or p.name == skip.name:
            continue
        value = _dummy(path, p, tmp_path)
        if p.param_type_name == "argument":
            positional.append(value)
        else:
            options += [p.opts[0], value]
    return words, positional, options


def _flag(p):
    return p.opts[-1] if p.param_type_name == "option" else p.name


def _bad_values(rng, kind):
    """Values outside ``rng``: below, above, and non-finite for floats."""
    bad = []
    if rng.lo is not None:
        lo = rng.lo if rng.lo_open else rng.lo - (1 if kind == "int" else 0.5)
        bad.append(str(int(lo)) if kind == "int" else str(lo))
    if rng.hi is not None:
        hi = rng.hi if rng.hi_open else rng.hi + (1 if kind == "int" else 0.5)
        bad.append(str(int(hi)) if kind == "int" else str(hi))
    if kind == "float":
        bad.append("nan")
    return bad


def _cases(commands):
    for path, leaf in commands.items():
        for p in leaf.params:
            kind = numeric_kind(p)
            if kind is not None:
                rng = range_for(path, p)
                for bad in _bad_values(rng, kind) if rng is not None else []:
                    yield path, leaf, p, bad, None
            elif p.name == "device":
                yield path, leaf, p, "tpu", "unknown device"
            elif (pk := PATHS.get(path, {}).get(p.name)) is not None:
                yield path, leaf, p, pk, {"in_file": "is a folder", "in_dir": "is a file",
                                          "out_file": "is a folder", "out_dir": "is a file"}[pk]


def test_every_numeric_option_has_a_range(root):
    _, commands = root
    missing = [f"{path} --{p.name}" for path, leaf in commands.items() for p in leaf.params
               if numeric_kind(p) is not None and range_for(path, p) is None]
    assert not missing, f"declare a range in icml26.cli_checks.RANGES for: {missing}"
    stale = [f"{c} {n}" for table in (cli_checks.RANGES, PATHS) for c, opts in table.items()
             for n in opts if c not in commands or n not in {p.name for p in commands[c].params}]
    assert not stale, f"RANGES/PATHS name options that do not exist: {stale}"


def test_every_bad_value_is_a_usage_error_before_any_work(root, invoke, tmp_path):
    _, commands = root
    failures, n = [], 0
    for path, leaf, p, bad, expect in _cases(commands):
        words, positional, options = _args(path, leaf, tmp_path, p)
        if expect is None:  # a number out of range
            value = bad
        elif bad in ("in_file", "out_file"):  # a folder where a file is expected
            (tmp_path / "a_folder").mkdir(exist_ok=True)
            value = str(tmp_path / "a_folder")
        elif bad in ("in_dir", "out_dir"):  # a file where a folder is expected
            (tmp_path / "a_file").write_text("x")
            value = str(tmp_path / "a_file")
        else:
            value = bad
        if p.param_type_name == "argument":
            positional.append(value)  # the only required argument left out is this one
            line = [*words, *options, *positional]
        else:
            line = [*words, *positional, *options, _flag(p), value]
        r = invoke(line)
        n += 1
        out = r.output
        ok = (r.exit_code == 2 and isinstance(r.exception, SystemExit)
              and "Traceback" not in out and "Invalid value" in out
              and (p.name in out or _flag(p) in out)
              and (expect is None or expect in " ".join(out.replace("│", " ").split())))
        if not ok:
            failures.append(f"icml26 {' '.join(line)} -> exit {r.exit_code}, "
                            f"{type(r.exception).__name__}: {out[-300:]!r}")
    assert n > 250  # every method's numeric, device and path options
    assert not failures, "\n".join(failures)


def test_ranges_describe_and_accept_defaults(root):
    """Each option's default lies inside its range (the check also runs on defaults)."""
    _, commands = root
    bad = []
    for path, leaf in commands.items():
        for p in leaf.params:
            rng = range_for(path, p)
            if rng is not None and p.default is not None and rng.error(p.default) is not None:
                bad.append(f"{path} --{p.name} default {p.default}: {rng.error(p.default)}")
    assert not bad, bad


def test_issue_examples(invoke, tmp_path):
    """The commands of issue 40's list, as a user would type them."""
    data = tmp_path / "r.csv"
    data.write_text("model,item,correct\nm,i,1\n")
    folder = tmp_path / "d"
    folder.mkdir()
    cases = [
        (["chemcensor", "score", str(data), "--db", str(data), "-o", "o.csv",
          "--max-center-type", "9"], "must be in [1, 4]; got 9"),
        (["tie", "simulate", "--trace", str(data), "--max-num-seqs", "-1"], ">= 1; got -1"),
        (["cclrec", "train", str(data), "--out", "m", "--dim", "-5"], ">= 1; got -5"),
        (["binarypc", "calibrate", "-o", "d.safetensors", "--bits", "0"], "in [1, 64]; got 0"),
        (["atlas", "calibrate", str(data), "-o", str(folder)], "is a folder; give a file name"),
        (["chemcensor", "score", str(data), "--db", str(data), "-o", str(folder)],
         "is a folder; give a file name"),
        (["atlas", "calibrate", str(folder)], "is a folder; give a file"),
        (["binarypc", "eval", "--device", "tpu"], "unknown device 'tpu'"),
    ]
    for line, msg in cases:
        r = invoke(line)
        text = " ".join(r.output.replace("│", " ").split())
        assert r.exit_code == 2 and msg in text, (line, r.output)


def test_cuda_without_a_gpu_is_a_usage_error(invoke):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    r = invoke(["tie", "sample-lengths", "--prompts", __file__, "--device", "cuda"])
    assert r.exit_code == 2 and "no CUDA GPU" in " ".join(r.output.replace("│", " ").split())
