"""The ``--opt KEY=VALUE`` keys a claim accepts, and the check that refuses any other.

A claim declares its keys as a tuple of :class:`Opt` (``Claim.options``, filled from
``icml26/claim_options.py``). ``icml26 reproduce`` checks every ``--opt`` with
:func:`check_options` before any claim starts: an unknown key, or a value of the wrong type or
out of range, is a :class:`~icml26.core.errors.UserError` (one line, exit 2) naming the key and
listing the claim's keys. ``icml26 show NAME`` prints the keys (:meth:`Opt.describe`).

Values stay strings: a claim parses its options as before; the check only refuses what the claim
would misread (``flag=true`` where the claim compares with ``"1"``) or reject once it is running.
This module imports nothing heavy (``icml26 --help`` and ``list`` read it).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from icml26.core.errors import UserError

__all__ = ["TYPES", "Opt", "check_options"]

#: ``bool`` is ``0`` or ``1``; ``list`` is comma-separated, each item of type ``Opt.item``;
#: ``path`` is a file or folder name (not checked for existence: some are outputs).
TYPES = ("int", "float", "str", "bool", "choice", "list", "path")
_ITEMS = ("int", "float", "str")


@dataclass(frozen=True)
class Opt:
    """One ``--opt`` key: its ``type`` (one of :data:`TYPES`), a one-line ``help``, and the
    allowed values where the claim has a rule: ``choices`` (a ``choice``, or each item of a
    ``list``), ``min``/``max`` (inclusive; ``min`` exclusive with ``exclusive_min``) for an
    ``int``, a ``float`` or each item of a numeric ``list``. ``internal`` keys are set by the claim
    itself (for its units or workers): never accepted from the command line, not shown."""

    name: str
    type: str
    help: str
    choices: tuple[str, ...] | None = None
    min: float | None = None
    max: float | None = None
    item: str = "str"
    exclusive_min: bool = False
    internal: bool = False

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ValueError(f"Opt {self.name!r}: type must be one of {', '.join(TYPES)}; "
                             f"got {self.type!r}")
        if self.item not in _ITEMS:
            raise ValueError(f"Opt {self.name!r}: item must be one of {', '.join(_ITEMS)}; "
                             f"got {self.item!r}")
        if self.type == "choice" and not self.choices:
            raise ValueError(f"Opt {self.name!r}: a choice needs choices")
        if (self.min is not None or self.max is not None) and self._kind() not in ("int", "float"):
            raise ValueError(f"Opt {self.name!r}: min/max need an int or float (or a list of them)")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"Opt {self.name!r}: min {self.min} > max {self.max}")
        if not self.help or "\n" in self.help:
            raise ValueError(f"Opt {self.name!r}: help must be one non-empty line")

    def _kind(self) -> str:
        """The type each value (each item, for a list) is parsed as."""
        return self.item if self.type == "list" else self.type

    def describe(self) -> str:
        """The type with its range or choices, e.g. ``int >= 1``, ``list of float in (0, 1]``."""
        kind = self._kind()
        if self.type == "bool":
            return "0|1"
        if self.type == "path":
            return "path"
        text = kind if self.type != "choice" else ""
        if self.choices:
            text = ("one of " if self.type == "choice" else f"{kind}: ") + "|".join(self.choices)
        lo = "(" if self.exclusive_min else "["
        if self.min is not None and self.max is not None:
            text += f" in {lo}{self.min:g}, {self.max:g}]"
        elif self.min is not None:
            text += f" {'>' if self.exclusive_min else '>='} {self.min:g}"
        elif self.max is not None:
            text += f" <= {self.max:g}"
        return f"comma list of {text}" if self.type == "list" else text

    def problem(self, value: str) -> str | None:
        """Why ``value`` is not allowed, or None when it is."""
        if self.type == "bool":
            return None if value in ("0", "1") else "expected 0 or 1"
        if self.type == "path":
            return None if value.strip() else "expected a path"
        if self.type != "list":
            return self._item_problem(value)
        items = [x.strip() for x in value.split(",")]
        if self.item == "str":
            items = [x for x in items if x]
        for x in items:
            why = self._item_problem(x)
            if why is not None:
                return f"item {x!r}: {why}"
        return None

    def _item_problem(self, value: str) -> str | None:
        kind = self._kind()
        if kind in ("int", "float"):
            try:
                number = int(value) if kind == "int" else float(value)
            except ValueError:
                return f"expected {'an integer' if kind == 'int' else 'a number'}"
            if not math.isfinite(number):
                return "expected a finite number"
            if self.min is not None and (number <= self.min if self.exclusive_min
                                         else number < self.min):
                return f"must be {self.describe().removeprefix('comma list of ')}"
            if self.max is not None and number > self.max:
                return f"must be {self.describe().removeprefix('comma list of ')}"
            return None
        if self.choices is not None and value not in self.choices:
            return f"expected one of {'|'.join(self.choices)}"
        return None


def _keys(name: str, declared: Iterable[Opt]) -> str:
    keys = sorted(o.name for o in declared if not o.internal)
    return f"{name} accepts: {', '.join(keys)}" if keys else f"{name} accepts no --opt keys"


def check_options(claims: Iterable, options: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """The options each claim gets, ``{claim name: {key: value}}``; raises :class:`UserError`.

    ``claims`` are :class:`~icml26.core.claims.Claim` objects (``name``, ``options``). A claim gets
    the keys it declares. A key that no claim of the run declares, or a value that a claim
    declaring the key does not allow, is a usage error naming the key and listing that claim's
    keys (with several claims, an unknown key names them and points to ``icml26 show``).
    """
    claims = list(claims)
    accepted = {c.name: {o.name: o for o in c.options if not o.internal} for c in claims}
    for key, value in options.items():
        takers = [c for c in claims if key in accepted[c.name]]
        if not takers:
            known = sorted({k for keys in accepted.values() for k in keys})
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            if len(claims) == 1:
                raise UserError(f"--opt {key}: unknown key for {claims[0].name}{hint}; "
                                f"{_keys(claims[0].name, claims[0].options)}")
            raise UserError(f"--opt {key}: no claim of this run ({', '.join(accepted)}) accepts "
                            f"it{hint}; `icml26 show NAME` lists a claim's keys")
        for c in takers:
            why = accepted[c.name][key].problem(value)
            if why is not None:
                raise UserError(f"--opt {key}={value!r} for {c.name}: {why}; "
                                f"{_keys(c.name, c.options)}")
    return {c.name: {k: v for k, v in options.items() if k in accepted[c.name]} for c in claims}
