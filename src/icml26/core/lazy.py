"""Lazy package exports (PEP 562), so that ``import icml26.X.cli`` does not pull in torch.

A method package's ``__init__`` names where each public name lives and calls
:func:`lazy_exports`; the name's submodule is imported on first access, and
``from icml26.X import name`` keeps working exactly as with eager imports::

    __all__ = ["ItemBank", "calibrate"]
    _WHERE = {"ItemBank": "bank", "calibrate": "calibrate"}
    __getattr__, __dir__ = lazy_exports(__name__, _WHERE)

Two details keep the eager behaviour:

* a name that is also its submodule's name (``calibrate`` from ``icml26.atlas.calibrate``) stays
  the function after that submodule is imported: the import system sets the package attribute
  to the submodule, and the package's module class turns that back into the exported name, as
  the eager ``from ... import calibrate`` in ``__init__`` used to;
* other submodules (``icml26.cat.model``) are reachable as attributes, imported on access; one
  that cannot be imported (an optional extra missing) is no attribute, as before.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types


class _LazyPackage(types.ModuleType):
    """A package whose exported name shadows a same-named submodule, as an eager import did."""

    def __setattr__(self, name: str, value) -> None:
        where = self.__dict__.get("_lazy_where", {})
        if (
            isinstance(value, types.ModuleType)
            and where.get(name) == name
            and value.__name__ == f"{self.__name__}.{name}"
            and hasattr(value, name)
        ):
            value = getattr(value, name)
        super().__setattr__(name, value)


def lazy_exports(package: str, where: dict[str, str]):
    """``(__getattr__, __dir__)`` for ``package``: each name in ``where`` from its submodule."""
    module = sys.modules[package]
    module.__dict__["_lazy_where"] = dict(where)
    if type(module) is types.ModuleType:
        module.__class__ = _LazyPackage

    def __getattr__(name: str):
        if name in where:
            value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
            module.__dict__[name] = value
            return value
        if not name.startswith("_"):
            try:
                spec = importlib.util.find_spec(f"{package}.{name}")
            except (ImportError, ValueError):
                spec = None
            if spec is not None:
                try:
                    return importlib.import_module(f"{package}.{name}")
                except ImportError as exc:  # an optional extra: absent, as before (hasattr False)
                    raise AttributeError(
                        f"module {package!r} has no attribute {name!r} ({exc})"
                    ) from exc
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(module.__dict__) | set(where))

    return __getattr__, __dir__
