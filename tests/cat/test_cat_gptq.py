"""GPTQ (icml26.cat.gptq) against the explicit OBS sequence, RTN, and its bad input."""

import pytest
import torch

from icml26.cat.gptq import gptq_codes, gptq_quantize
from icml26.cat.quant import dequantize_codes, quantize_sym, rtn_codes

F64 = torch.float64


def _problem(m=5, d=12, n=200, seed=0):
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(d, d, generator=g, dtype=F64)
    x = torch.randn(n, d, generator=g, dtype=F64) @ mix  # correlated inputs
    w = torch.randn(m, d, generator=g, dtype=F64)
    return w, x.T @ x


def _obs_reference(w, h, bits, damp=0.01):
    """Quantize columns in order; after each, move the remaining ones by the closed-form OBS
    update with a fresh inverse of the Hessian restricted to the columns left (float64)."""
    w = w.clone()
    d = w.shape[1]
    h = h + damp * torch.diagonal(h).mean() * torch.eye(d, dtype=F64)
    qmax = 2 ** (bits - 1) - 1
    scale = w.abs().amax(1) / qmax
    q = torch.zeros_like(w)
    for j in range(d):
        hinv = torch.linalg.inv(h[j:, j:])  # columns j.. left
        q[:, j] = torch.clamp(torch.round(w[:, j] / scale), -qmax, qmax) * scale
        err = (w[:, j] - q[:, j]) / hinv[0, 0]
        w[:, j:] -= err[:, None] * hinv[0][None, :]
    return q


@pytest.mark.parametrize("block_size", [128, 4, 5])
def test_gptq_equals_the_explicit_obs_sequence(block_size):
    w, h = _problem()
    ours = gptq_quantize(w, h, 3, block_size=block_size)
    assert torch.allclose(ours, _obs_reference(w, h, 3), atol=1e-10)


def test_gptq_with_a_diagonal_hessian_is_rtn():
    w, _ = _problem()
    h = torch.diag(torch.rand(12, dtype=F64) + 0.5)
    assert torch.allclose(gptq_quantize(w, h, 4), quantize_sym(w, 4, "channel"), atol=1e-12)


def test_gptq_lowers_the_layer_error_against_rtn():
    for seed in range(3):
        w, h = _problem(m=16, d=24, seed=seed)

        def err(q, w=w, h=h):
            e = w - q
            return float(torch.trace(e @ h @ e.T))

        assert err(gptq_quantize(w, h, 4)) < 0.8 * err(quantize_sym(w, 4, "channel"))


def test_gptq_group_codes_and_scales():
    w, h = _problem(m=6, d=16)
    codes, scales = gptq_codes(w, h, 4, "group", 8, block_size=8)
    assert codes.dtype == torch.int8 and scales.shape == (6, 2)
    assert int(codes.abs().max()) <= 7
    assert torch.allclose(dequantize_codes(codes, scales), gptq_quantize(w, h, 4, "group", 8))


def test_rtn_codes_match_quantize_sym():
    w, _ = _problem(m=7, d=16)
    for gran, gs in (("channel", None), ("group", 4)):
        c, s = rtn_codes(w, 4, gran, gs)
        assert torch.equal(dequantize_codes(c, s), quantize_sym(w, 4, gran, gs))


def test_gptq_too_few_tokens_names_the_layer():
    w, h = _problem()
    with pytest.raises(ValueError, match="blocks.3.down_proj: GPTQ needs at least .* 12 .* got 5"):
        gptq_codes(w, h, 4, n_tokens=5, layer="blocks.3.down_proj")


def test_model_gptq_too_few_tokens_names_the_linear():
    from icml26.cat.model import collect_covariances, fake_quantize, group_hessians
    from icml26.core.lm import tiny_llama

    model = tiny_llama(hidden=32, layers=1, heads=4, kv_heads=2, ffn=48, seed=0)[0]
    groups = collect_covariances(model, [torch.randint(0, 250, (1, 20))])  # 20 < 32 tokens
    with pytest.raises(ValueError, match=r"model\.layers\.0\.self_attn\.q_proj: GPTQ needs"):
        fake_quantize(model, 4, 4, hessians=group_hessians(groups))
