"""``icml26.core.hfcache``: the cache keyword / output field on both sides of transformers'
``past_key_values`` -> ``cache`` rename (5.17 vs 5.2x), without either version in particular."""

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from icml26.core.hfcache import cache_field, cache_kw, cache_kwarg, output_cache, take_cache


def new_forward(input_ids=None, cache=None, use_cache=None, **kwargs):
    pass


def old_forward(input_ids=None, past_key_values=None, use_cache=None, **kwargs):
    pass


def kwargs_only(**kwargs):
    pass


@dataclass
class NewOut:
    logits: Any = None
    cache: Any = None


@dataclass
class OldOut:
    logits: Any = None
    past_key_values: Any = None


def test_cache_kwarg_follows_the_signature():
    assert cache_kwarg(new_forward) == "cache"
    assert cache_kwarg(old_forward) == "past_key_values"
    assert cache_kwarg(SimpleNamespace(forward=old_forward)) == "past_key_values"  # a model
    assert cache_kw(SimpleNamespace(forward=new_forward), 7) == {"cache": 7}
    # neither declared: the installed transformers' own name
    from transformers.modeling_outputs import BaseModelOutputWithPast

    assert cache_kwarg(kwargs_only) == cache_field(BaseModelOutputWithPast)


def test_output_cache_reads_either_field():
    c = object()
    assert output_cache(NewOut(cache=c)) is c
    assert output_cache(OldOut(past_key_values=c)) is c
    assert output_cache(OldOut()) is None and output_cache(None) is None
    assert output_cache(SimpleNamespace(past_key_values=c)) is c
    assert output_cache({"past_key_values": c}) is c
    assert cache_field(NewOut) == "cache" and cache_field(OldOut()) == "past_key_values"


def test_output_cache_of_installed_transformers_outputs():
    from transformers.modeling_outputs import CausalLMOutputWithPast

    c = object()
    out = CausalLMOutputWithPast(logits=1, **{cache_field(CausalLMOutputWithPast): c})
    assert output_cache(out) is c


def test_take_cache():
    c = object()
    kw = {"past_key_values": c, "x": 1}
    assert take_cache(kw) is c and kw == {"x": 1}
    kw = {"cache": None, "past_key_values": c}
    assert take_cache(kw) is c and kw == {}
    assert take_cache({}, c) is c
    assert take_cache({"cache": c}, c) is c
    with pytest.raises(ValueError, match="two different caches"):
        take_cache({"cache": c, "past_key_values": object()})
