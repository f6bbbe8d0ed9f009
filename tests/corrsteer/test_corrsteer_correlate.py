import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.core.errors import UserError
from icml26.core.lm import tiny_llama
from icml26.corrsteer.correlate import CorrelationAccumulator, check_rewards, collect, pool_steps


def _ref_corr(x, y):
    out = np.zeros(x.shape[1])
    for j in range(x.shape[1]):
        if np.ptp(x[:, j]) > 0:
            out[j] = np.corrcoef(x[:, j], y)[0, 1]
    return out


def test_corr_matches_numpy_with_offsets_and_constants():
    rng = np.random.default_rng(0)
    n, d = 500, 12
    y = (rng.random(n) < 0.4).astype(float)
    x = rng.normal(size=(n, d)) + 0.8 * y[:, None] * np.arange(d) / d
    x[:, 3] += 1e4  # far offset
    x[:, 5] = 7.25  # constant -> r = 0, no NaN
    x[:, 6] = 0.0
    acc = CorrelationAccumulator(d).update(x, y)
    r = acc.corr()
    assert np.all(np.isfinite(r))
    np.testing.assert_allclose(r, _ref_corr(x, y), atol=1e-10)
    assert r[5] == 0 and r[6] == 0


def test_coefficients_closed_form():
    x = np.array([[0.0, 2.0], [3.0, 0.0], [1.0, 4.0], [5.0, 5.0]])
    y = np.array([1, 1, 0, 1])
    acc = CorrelationAccumulator(2).update(x, y)
    np.testing.assert_allclose(acc.coefficients("mean"), [8 / 3, 7 / 3])
    np.testing.assert_allclose(acc.coefficients("real"), [4.0, 3.5])
    with pytest.raises(UserError, match="coefficient mode"):
        acc.coefficients("median")


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 60), st.integers(1, 5), st.integers(0, 10_000), st.floats(-1e4, 1e4))
def test_merge_equals_one_pass(n, parts, seed, offset):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)) + offset
    y = rng.integers(0, 2, n).astype(float)
    one = CorrelationAccumulator(4).update(x, y)
    cuts = np.sort(rng.integers(0, n, parts))
    merged = CorrelationAccumulator(4)
    for chunk_x, chunk_y in zip(np.split(x, cuts), np.split(y, cuts), strict=True):
        merged.merge(CorrelationAccumulator(4).update(chunk_x, chunk_y))
    assert merged.n == n
    np.testing.assert_allclose(merged.corr(), one.corr(), atol=1e-7)
    np.testing.assert_allclose(merged.coefficients(), one.coefficients(), rtol=1e-12, atol=1e-9)


def test_shared_shift_merges_by_addition():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(40, 3)), rng.integers(0, 2, 40).astype(float)
    a = CorrelationAccumulator(3, shift=np.zeros(3)).update(x[:20], y[:20])
    b = CorrelationAccumulator(3, shift=np.zeros(3)).update(x[20:], y[20:])
    one = CorrelationAccumulator(3, shift=np.zeros(3)).update(x, y)
    for k in ("sx", "sxx", "sxy"):
        np.testing.assert_allclose(getattr(a, k) + getattr(b, k), getattr(one, k), rtol=1e-12)


def test_bad_inputs():
    acc = CorrelationAccumulator(3)
    with pytest.raises(ValueError, match="update needs"):
        acc.update(np.zeros((2, 4)), np.zeros(2))
    with pytest.raises(ValueError, match="finite"):
        acc.update(np.full((1, 3), np.nan), np.zeros(1))
    with pytest.raises(UserError, match="base accuracy 1.000"):
        check_rewards([1, 1, 1])
    with pytest.raises(UserError, match="empty"):
        check_rewards([])


def test_pool_steps_masks_padding():
    steps = torch.tensor([[[1.0], [5.0]], [[3.0], [9.0]], [[2.0], [-1.0]]])  # (S=3, B=2, d=1)
    mask = torch.tensor([[True, True], [True, False], [False, False]])
    assert pool_steps(steps, mask, "max").flatten().tolist() == [3.0, 5.0]
    assert pool_steps(steps, mask, "mean").flatten().tolist() == [2.0, 5.0]
    assert pool_steps(steps, torch.zeros(3, 2, dtype=torch.bool)).abs().sum() == 0


def test_collect_hooks_once_per_forward_and_pools_to_eos():
    model, tok = tiny_llama(hidden=32, layers=3, heads=4, seed=0)
    model.generation_config.eos_token_id = None  # run all steps; EOS logic tested via pool_steps
    prompts = ["ab", "hello there", "xyz!"]
    got = collect(model, tok, {1: None, 2: None}, prompts, lambda i, t: float(i % 2), max_new_tokens=4,
                  raw=True, batch_size=2, keep=True)
    # 2 batches x 4 forwards (prefill + 3 cached steps) x 2 layers
    assert got.hook_calls == 2 * 4 * 2
    assert got.pooled[1].shape == (3, 32)
    # Reference: the max over the residuals entering block 1 at each generated position.
    tok.padding_side = "left"
    enc = tok(prompts[:2], return_tensors="pt", padding=True)
    out = model.generate(**enc, max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
    with torch.no_grad():
        hs = model(input_ids=out, attention_mask=(out != tok.pad_token_id) | (torch.arange(out.shape[1]) >= enc["input_ids"].shape[1]),
                   output_hidden_states=True).hidden_states[1]
    T = enc["input_ids"].shape[1]
    ref = hs[:, T - 1:T + 3].amax(1)
    torch.testing.assert_close(got.pooled[1][:2], ref, atol=1e-4, rtol=1e-4)
    np.testing.assert_array_equal(got.rewards, [0, 1, 0])
