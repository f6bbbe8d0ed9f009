"""RESTORE on a transformers-5.17-shaped language model: its forward takes ``past_key_values``
(a ``cache=`` keyword would be silently ignored) and its output has no ``.cache``. The reduced
prefill and the decode steps after it must equal the installed transformers' own path (the
request's RestoreState rides on the cache either way)."""

import torch
from transformers import DynamicCache

from icml26.core.hfcache import output_cache
from icml26.restore import RestoreConfig, apply_restore, remove_restore
from icml26.restore.patch import restore_state
from icml26.restore.vlm import tiny_llava

N = 64  # 32x32 image, patch 4
IMG = 63


def _run(model, ids, px, name):
    """Prefill + 2 greedy decode steps through the patched inner model, passing the cache under
    ``name`` (what the outer forward / generate of that transformers version passes)."""
    inner = model.model
    with torch.no_grad():
        out = inner(input_ids=ids, pixel_values=px, use_cache=True, **{name: DynamicCache()})
        cache = output_cache(out)
        hs = [out.last_hidden_state[:, -1]]
        for _ in range(2):
            tok = model.lm_head(hs[-1]).argmax(-1, keepdim=True)
            out = inner(input_ids=tok, use_cache=True, **{name: cache})
            assert output_cache(out) is cache
            hs.append(out.last_hidden_state[:, -1])
    return torch.stack(hs), cache


def test_restore_on_an_old_cache_api_language_model_equals_the_installed_path(old_cache_api):
    g = torch.Generator().manual_seed(3)
    ids = torch.tensor([[1, 2, 3] + [IMG] * N + [4, 5, 6, 7, 8]] * 2)
    px = torch.randn(2, 3, 32, 32, generator=g, dtype=torch.float64)
    cfg = RestoreConfig(reducer="divprune", keep=8)  # retained positions + calibration

    model = tiny_llava(dtype=torch.float64, layers=3)
    apply_restore(model, cfg)
    try:
        ref, ref_cache = _run(model, ids, px, "cache" if _new(model) else "past_key_values")
        old_cache_api(model.model.language_model)
        got, cache = _run(model, ids, px, "past_key_values")
    finally:
        remove_restore(model)
    st = restore_state(cache)
    assert st is not None and st.phase == "decode"  # the decode steps ran on RESTORE's state
    assert cache.get_seq_length() == st.prefill_len + 2 < ids.shape[1]  # the reduced prefill
    assert ref_cache.get_seq_length() == cache.get_seq_length()
    assert torch.equal(got, ref)
    # the test can fail: decoding on the same cache without RESTORE's state differs
    delattr(cache, "_icml26_restore_state")
    model.model.language_model.__dict__.pop("forward", None)
    apply_restore(model, cfg)
    try:
        with torch.no_grad():
            tok = model.lm_head(got[1]).argmax(-1, keepdim=True)
            cache.crop(-1)  # back to prefill + 1 token
            name = "cache" if _new(model) else "past_key_values"
            lost = model.model(input_ids=tok, use_cache=True, **{name: cache}).last_hidden_state
    finally:
        remove_restore(model)
    assert not torch.allclose(lost[:, -1], got[2])


def _new(model) -> bool:
    import inspect

    return "cache" in inspect.signature(type(model.model).forward).parameters
