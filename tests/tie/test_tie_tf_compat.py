"""TIE's ``concat`` sampler on a transformers-5.17-shaped model (forward takes ``past_key_values``,
a ``cache=`` keyword would be silently ignored; outputs have no ``.cache``): every forward's
logits, and so every draw, equal the installed transformers' path, through refills and merges."""

import functools

import torch

from icml26.core.lm import tiny_llama
from icml26.tie.sampling import SampleConfig, sample_lengths


def _recording(model, seen: list):
    fwd = model.forward

    @functools.wraps(fwd)  # keeps the signature the sampler inspects
    def forward(*args, **kwargs):
        out = fwd(*args, **kwargs)
        seen.append(out.logits[:, -1].clone())
        return out

    model.forward = forward
    return model


def test_concat_engine_on_an_old_cache_api_model(old_cache_api):
    prompts = ["a", "hello there", "the quick brown fox", "xyz 123"]
    cfg = SampleConfig(n_samples=2, cap=6, temperature=1.0, batch_size=3, refill_at=1,
                       engine="concat")
    runs = []
    for old in (False, True):
        model, tok = tiny_llama(hidden=64, layers=2, heads=4, kv_heads=2, seed=3)
        model.eval()
        if old:
            old_cache_api(model)
        seen: list = []
        res = sample_lengths(_recording(model, seen), tok, prompts, cfg)
        runs.append((res, seen))
    (ref, ref_logits), (got, got_logits) = runs
    assert got == ref
    assert len(got_logits) == len(ref_logits) > len(prompts)  # decode steps, not only prefills
    for a, b in zip(got_logits, ref_logits, strict=True):
        assert torch.equal(a, b)
