"""The KV-cache keyword and output field of HF models, across transformers 5.x.

transformers renamed ``past_key_values`` to ``cache`` during 5.x (5.17 still takes and returns
``past_key_values``; 5.25 takes and returns ``cache`` and keeps the old name only as a deprecated
alias). Code that passes a cache to a model, reads one from its output, or builds an output class
goes through these helpers so that it works, with the same results, on either side of the rename:

- :func:`cache_kwarg` / :func:`cache_kw`: the keyword a model's (or module's) ``forward`` takes;
- :func:`take_cache`: pop a cache a caller passed under either name from ``kwargs``;
- :func:`output_cache`: the cache an output carries (``.cache`` or ``.past_key_values``);
- :func:`cache_field`: the field name of an output class.

No torch import here; transformers is only imported for the fallback of :func:`cache_kwarg`.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping

__all__ = ["NAMES", "cache_kwarg", "cache_kw", "take_cache", "output_cache", "cache_field"]

NAMES = ("cache", "past_key_values")  # new name first


def _params(fn) -> Mapping:
    target = getattr(fn, "forward", fn)  # a model / module: its (possibly patched) forward
    try:
        return inspect.signature(target).parameters
    except (TypeError, ValueError):
        return {}


def _installed_default() -> str:
    """The name the installed transformers uses (for callables that declare neither)."""
    try:
        from transformers.modeling_outputs import BaseModelOutputWithPast
    except Exception:  # pragma: no cover - transformers missing or broken
        return "past_key_values"
    return cache_field(BaseModelOutputWithPast)


def cache_kwarg(fn) -> str:
    """``"cache"`` or ``"past_key_values"``: the cache keyword that ``fn`` (a model, a module or
    a function) declares; the installed transformers' name when it declares neither (a forward
    taking only ``**kwargs``)."""
    params = _params(fn)
    for name in NAMES:
        if name in params:
            return name
    return _installed_default()


def cache_kw(fn, cache) -> dict:
    """``{cache_kwarg(fn): cache}``, to splat into a call: ``model(ids, **cache_kw(model, c))``."""
    return {cache_kwarg(fn): cache}


def take_cache(kwargs: dict, cache=None):
    """Remove a cache passed under either name from ``kwargs`` (in place) and return it (or
    ``cache`` when none was; raises if two different caches were given)."""
    for name in NAMES:
        if name in kwargs:
            got = kwargs.pop(name)
            if got is None:
                continue
            if cache is not None and got is not cache:
                raise ValueError("two different caches passed (as `cache` and `past_key_values`)")
            cache = got
    return cache


def cache_field(cls) -> str:
    """The cache field of an output class (or instance): ``"cache"`` or ``"past_key_values"``."""
    fields = getattr(cls, "__dataclass_fields__", None) or {}
    for name in NAMES:
        if name in fields:
            return name
    return "past_key_values"


def output_cache(out):
    """The KV cache a model output carries, whichever name it has (``None`` when it has none)."""
    if out is None:
        return None
    fields = getattr(type(out), "__dataclass_fields__", None) or {}
    for name in NAMES:
        if name in fields:
            return getattr(out, name)
    if isinstance(out, Mapping):
        for name in NAMES:
            if out.get(name) is not None:
                return out[name]
        return None
    for name in NAMES:
        val = getattr(out, name, None)
        if val is not None:
            return val
    return None
