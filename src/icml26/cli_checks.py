"""Up-front checks of the method subcommands' options: numbers, devices, input and output paths.

``icml26 NAME ...`` loads a method's typer app lazily (``icml26.cli._LazyGroup``) and calls
:func:`apply` on it, which gives each option a check that runs while the command line is parsed,
so a bad value is a usage error (exit 2, one message naming the option) before any model loads,
data is read or work is done:

- every int/float option has a :class:`Range` (:data:`RANGES`; an int not listed must be >= 1,
  ``--seed`` >= 0; a float not listed is refused by the test in tests/core/test_cli_checks.py,
  which walks every command and feeds each numeric option a value outside its range);
  floats must be finite;
- ``--device``: ``cpu`` passes without importing torch; anything else must be a device torch
  knows, and ``cuda`` needs a GPU that torch sees;
- :data:`PATHS`: an input file that is a folder (or a folder that is a file) is named as such,
  an output file that is a folder, an output folder that is a file, or an output whose folder
  cannot be created or written is refused (``core.io.check_output_file`` / ``check_output_dir``).

This module imports only typer and the standard library (help stays fast).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Range", "RANGES", "PATHS", "apply", "numeric_kind", "range_for"]


@dataclass(frozen=True)
class Range:
    """An interval for a numeric option; ``None`` ends are open to infinity."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def describe(self) -> str:
        if self.lo is not None and self.hi is not None:
            return (f"in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}"
                    f"{')' if self.hi_open else ']'}")
        if self.lo is not None:
            return f"{'>' if self.lo_open else '>='} {self.lo:g}"
        if self.hi is not None:
            return f"{'<' if self.hi_open else '<='} {self.hi:g}"
        return "any finite number"

    def error(self, value: float) -> str | None:
        """None when ``value`` is inside, else the message."""
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be a finite number {self.describe()}; got {value}"
        low = self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo)
        high = self.hi is not None and (value >= self.hi if self.hi_open else value > self.hi)
        return f"must be {self.describe()}; got {value}" if low or high else None


def ge(x: float) -> Range:
    return Range(lo=x)


def gt(x: float) -> Range:
    return Range(lo=x, lo_open=True)


def within(lo: float, hi: float, lo_open: bool = False, hi_open: bool = False) -> Range:
    return Range(lo, hi, lo_open, hi_open)


GE0, GE1, POS, ANY = ge(0), ge(1), gt(0), Range()
SHARE = within(0, 1, lo_open=True)  # a fraction of something, > 0 and <= 1
UNIT = within(0, 1)

# "method command" -> option name -> range. Ints not listed: >= 1 (counts, sizes, steps); seed >= 0.
RANGES: dict[str, dict[str, Range]] = {
    "algosteer run": {"temperature": GE0, "time_s": POS},
    "algosteer score": {"temperature": GE0, "time_s": POS},
    "algosteer promptfoo": {"temperature": GE0},
    "atlas calibrate": {"quadpts": ge(5), "tol": POS, "chunk": ge(2)},
    "atlas test": {"se_stop": POS, "min_items": GE0},
    "binarypc eval": {"budget": SHARE},
    "binarypc calibrate": {"bits": within(1, 64)},
    "cat sqnr": {"w_bits": within(2, 8), "a_bits": within(2, 8), "block": GE0, "damp": GE0},
    "cat quantize": {"w_bits": within(2, 8), "a_bits": within(2, 8), "block": GE0, "damp": GE0,
                     "alpha": UNIT},
    "cclrec train": {"patience": GE0, "lr": POS, "min_rating": ANY},
    "corrsteer train-sae": {"layer": GE0, "lr": POS},
    "chemcensor build-db": {"max_level": within(1, 4)},
    "chemcensor score": {"max_center_type": within(1, 4)},
    "chemcensor dataset": {"min_level": within(-1, 5), "folds": ge(2)},
    "chemcensor eval": {"min_level": within(-1, 5)},
    "cyberpal build": {"ood_share": within(0, 1, True, True), "id_test": POS},
    "cyberpal sft": {"lr": POS},
    "cyberpal eval": {"ood_share": within(0, 1, True, True), "id_test": POS},
    "deepcommit build": {"threshold": SHARE, "time_scale_h": POS, "timeout": POS},
    "deepcommit run": {"timeout": POS, "llm_temperature": GE0},
    "echo calibrate": {"auc_min": UNIT},
    "lems compress": {"ratio": SHARE, "trials": GE0},
    "quartet2 error": {"hadamard_dim": ge(16)},
    "quatro dual": {"delta": POS},
    "quatro train": {"lr": POS, "delta": POS, "group_size": ge(2)},
    "restore eval": {"gamma": UNIT, "c": gt(1)},
    "restore build": {"vision_steps": GE0, "qa_steps": GE0},
    "restore reduce": {"gamma": UNIT},
    "tie sample-lengths": {"temperature": POS},
    "tie fit": {"ks_boot": GE0},
    "tie simulate": {"pred_noise": GE0, "sigma_spread": GE0, "rate_scale": POS},
    "uds sft": {"budget": SHARE, "lr": POS, "alpha": GE0},
}

# "method command" -> path option -> in_file | in_dir | out_file | out_dir
PATHS: dict[str, dict[str, str]] = {
    "algosteer run": {"out": "out_file"},
    "algosteer classify": {"file": "in_file"},
    "algosteer stats": {"log": "in_file", "out": "out_dir"},
    "atlas calibrate": {"responses": "in_file", "out": "out_file"},
    "atlas test": {"bank_path": "in_file", "responses": "in_file", "trace": "out_file",
                   "out": "out_file"},
    "atlas score": {"bank_path": "in_file", "responses": "in_file"},
    "atlas responses": {"out": "out_file"},
    "binarypc calibrate": {"out": "out_file"},
    "cat sqnr": {"out": "out_file", "calib": "in_file"},
    "cat quantize": {"out": "out_dir", "calib": "in_file"},
    "cclrec train": {"data": "in_file", "out": "out_dir", "item": "in_file", "user": "in_file"},
    "cclrec recommend": {"model_dir": "in_dir", "out": "out_file", "users": "in_file"},
    "cclrec profiles": {"item": "in_file", "out": "out_file", "inter": "in_file",
                        "user": "in_file"},
    "corrsteer train-sae": {"out": "out_dir"},
    "corrsteer eval-sae": {"sae_dir": "in_dir"},
    "corrsteer select": {"sae_dir": "in_dir", "out": "out_file"},
    "corrsteer eval": {"spec": "in_file"},
    "chemcensor build-db": {"rxns": "in_file", "out": "out_file"},
    "chemcensor score": {"preds": "in_file", "db": "in_file", "out": "out_file",
                         "checkpoint": "out_file"},
    "chemcensor dataset": {"records": "in_file", "out": "out_file"},
    "chemcensor eval": {"preds": "in_file", "gold": "in_file", "db": "in_file"},
    "chemcensor setup-mapper": {"site": "out_dir"},
    "cyberpal build": {"out": "out_file", "formats": "in_dir", "records": "in_file",
                       "work_dir": "out_dir"},
    "cyberpal verify": {"data": "in_file", "formats": "in_dir"},
    "cyberpal sft": {"data": "in_file", "out": "out_dir"},
    "cyberpal eval": {"records": "in_file", "data": "in_file"},
    "deepcommit build": {"repo": "in_dir", "out": "out_dir"},
    "deepcommit run": {"data": "in_dir", "out": "out_dir"},
    "deepcommit score": {"data": "in_dir", "runs": "in_file"},
    "echo generate": {"gates_file": "in_file"},
    "echo calibrate": {"out": "out_file"},
    "lems compress": {"out": "out_dir", "calib": "in_file", "cache_dir": "out_dir"},
    "lems show": {"path": "in_dir"},
    "oserve plan": {"trace": "in_file", "out": "out_dir", "profile": "in_file"},
    "oserve simulate": {"trace": "in_file", "plan_dir": "in_dir", "profile": "in_file"},
    "quartet2 error": {"tensors": "in_file", "out": "out_file"},
    "quatro train": {"out": "out_dir"},
    "restore eval": {"data": "in_file", "out": "out_file"},
    "restore build": {"out": "out_dir"},
    "restore make-data": {"out": "out_dir"},
    "skillpro train": {"out": "out_dir"},
    "skillpro eval": {"pool": "in_dir"},
    "skillpro export": {"pool": "in_dir", "out": "out_dir"},
    "tie sample-lengths": {"prompts": "in_file", "out": "out_file"},
    "tie fit": {"lengths": "in_file", "out": "out_file"},
    "tie train": {"prompts": "in_file", "fits": "in_file", "out": "out_file"},
    "tie simulate": {"trace": "in_file"},
    "uds sft": {"data": "in_file", "out": "out_dir"},
}


def numeric_kind(param: Any) -> str | None:
    """"int" or "float" for a numeric option (``int | None`` too), else None (bools are not)."""
    desc = getattr(param, "type_descriptor", None)
    ann = getattr(desc, "annotation", None)
    args = getattr(ann, "__args__", None)
    types = [a for a in args if a is not type(None)] if args else [ann]
    if len(types) != 1:
        return None
    return {int: "int", float: "float"}.get(types[0])


def range_for(command: str, param: Any) -> Range | None:
    """The range of ``param`` of ``command`` ("tie simulate"), or None when it is not numeric."""
    kind = numeric_kind(param)
    if kind is None:
        return None
    declared = RANGES.get(command, {}).get(param.name)
    if declared is not None:
        return declared
    if param.name == "seed":
        return GE0
    return GE1 if kind == "int" else None  # a float must be declared (the test says which)


def _check_path(kind: str, path: Path, flag: str) -> None:
    from icml26.core.errors import UserError
    from icml26.core.io import check_output_dir, check_output_file

    if kind == "in_file":
        if path.is_dir():
            raise UserError(f"{path} is a folder; give a file")
        if not path.exists():
            raise UserError(f"{path} does not exist")
        if not os.access(path, os.R_OK):
            raise UserError(f"{path} is not readable")
    elif kind == "in_dir":
        if path.exists() and not path.is_dir():
            raise UserError(f"{path} is a file; give a folder")
        if not path.exists():
            raise UserError(f"folder {path} does not exist")
    elif kind == "out_file":
        check_output_file(path, "output file")
    elif kind == "out_dir":
        check_output_dir(path, "output folder")
    else:  # pragma: no cover - a typo in PATHS
        raise ValueError(f"unknown path kind {kind!r} for {flag}")


def _check_device(value: str) -> None:
    if value == "cpu" or value.startswith("cpu:"):
        return
    import torch  # only for a non-CPU device

    from icml26.core.errors import UserError
    from icml26.core.torchutil import check_device

    try:
        torch.device(value)
    except RuntimeError:
        raise UserError(f"unknown device {value!r}; use cpu, cuda or cuda:N") from None
    check_device(value)


def _checked(previous, check):
    """A click parameter callback that runs ``check(value)`` (UserError -> usage error), then
    ``previous``, if any."""
    import typer

    from icml26.core.errors import UserError

    def callback(ctx, param, value):
        if value is not None:
            try:
                for v in value if isinstance(value, list | tuple) else [value]:
                    check(v, param)
            except UserError as exc:
                raise typer.BadParameter(str(exc), ctx=ctx, param=param) from None
        return previous(ctx, param, value) if previous is not None else value

    callback.icml26_check = check
    return callback


def apply(command: Any, path: str) -> Any:
    """Give every option of ``command`` (a click command or group named ``path``, e.g.
    "tie") its up-front check; returns ``command``. Idempotent."""
    from icml26.core.errors import UserError

    subcommands = getattr(command, "commands", None)
    if subcommands is not None:
        for name, sub in subcommands.items():
            apply(sub, f"{path} {name}")
        return command
    for param in command.params:
        if getattr(param.callback, "icml26_check", None) is not None:
            continue
        flag = param.opts[-1] if param.opts else param.name
        rng = range_for(path, param)
        kind = PATHS.get(path, {}).get(param.name)
        if rng is not None:
            if rng != ANY:
                param.help = f"{param.help or ''} (must be {rng.describe()})".strip()

            def check(v, p, rng=rng):
                if (msg := rng.error(v)) is not None:
                    raise UserError(msg)
        elif param.name == "device":
            def check(v, p):
                _check_device(str(v))
        elif kind is not None:
            def check(v, p, kind=kind, flag=flag):
                _check_path(kind, Path(v), flag)
        else:
            continue
        param.callback = _checked(param.callback, check)
    return command
