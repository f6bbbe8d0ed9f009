"""The quantizer against brute force, and the SQNR model against measurement."""

import itertools

import pytest
import torch

from icml26.cat.quant import QuantConfig, quantize_sym
from icml26.cat.sqnr import concentration, sqnr_terms

F64 = torch.float64


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_quantizer_matches_brute_force_nearest_level(bits):
    g = torch.Generator().manual_seed(bits)
    x = torch.randn(7, 16, generator=g, dtype=F64)
    q = quantize_sym(x, bits, "token")
    qmax = 2 ** (bits - 1) - 1
    scale = x.abs().amax(1, keepdim=True) / qmax  # (7, 1)
    grid = torch.arange(-qmax, qmax + 1, dtype=F64)[None, None] * scale[..., None]  # (7, 1, L)
    nearest = grid.squeeze(1).gather(1, (x[..., None] - grid).abs().argmin(-1))
    torch.testing.assert_close(q, nearest, rtol=0, atol=1e-12)


def test_group_and_tensor_granularity():
    x = torch.tensor([[1.0, -2.0, 100.0, 50.0]], dtype=F64)
    grouped = quantize_sym(x, 4, "group", group_size=2)
    assert grouped[0, 0] != 0  # the first group has its own small scale
    tensor = quantize_sym(x, 4, "tensor")
    assert tensor[0, 0] == 0  # one scale of 100/7: 1.0 rounds to 0
    with pytest.raises(ValueError, match="group_size 3"):
        quantize_sym(x, 4, "group", group_size=3)


@pytest.mark.parametrize("bits", [1, 9, 4.0])
def test_bits_out_of_range(bits):
    with pytest.raises(ValueError, match=r"w_bits must be an integer in \[2, 8\]"):
        QuantConfig(w_bits=bits)


def test_concentration_bounds():
    v = torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 3.0, 0.0]])
    torch.testing.assert_close(concentration(v), torch.tensor([1.0, 4.0], dtype=F64))
    for row in itertools.islice(torch.randn(50, 10, dtype=F64), 50):
        k = float(concentration(row[None]))
        assert 1.0 <= k <= 10.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_predicted_sqnr_within_1db_at_8_bits(seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(64, 128, generator=g, dtype=F64)
    x = torch.randn(4096, 128, generator=g, dtype=F64) @ torch.randn(
        128, 128, generator=g, dtype=F64
    )
    t = sqnr_terms(w, x, 8, 8)
    assert abs(t["predicted_db"] - t["measured_db"]) < 1.0
    parts = t["bits_db"] + t["concentration_db"] + t["alignment_db"]
    assert parts == pytest.approx(t["predicted_db"], abs=1e-9)


def test_more_bits_more_sqnr():
    g = torch.Generator().manual_seed(5)
    w, x = torch.randn(16, 32, generator=g, dtype=F64), torch.randn(500, 32, generator=g, dtype=F64)
    assert (
        sqnr_terms(w, x, 8, 8)["measured_db"]
        > sqnr_terms(w, x, 4, 8)["measured_db"]
        > (sqnr_terms(w, x, 4, 4)["measured_db"])
    )
