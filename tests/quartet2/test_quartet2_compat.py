"""``compat="torchao"``: every convention that differs from the default, and bit-exactness with
torchao's NVFP4 quantizer when torchao is installed."""

import contextlib
import importlib
import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

from icml26.quartet2.nvfp4 import E4M3_MIN_NORMAL, fake_quant, quantize_nvfp4


def _bytes(q):
    return q.scales.view(torch.uint8)


def test_zero_block_scale_byte():
    x = torch.randn(2, 32, generator=torch.Generator().manual_seed(0))
    x[0, :16] = 0
    assert int(_bytes(quantize_nvfp4(x))[0, 0]) == 0x38  # scale 1
    assert int(_bytes(quantize_nvfp4(x, compat="torchao"))[0, 0]) == 0x08  # 2^-6


def test_sub_2_pow_minus_6_block_scales_are_clamped():
    x = torch.randn(1, 64, generator=torch.Generator().manual_seed(1)) * 1e-3
    x[0, 0] = 100.0  # the other blocks' scales fall far below 2^-6 against this tensor scale
    d, t = quantize_nvfp4(x), quantize_nvfp4(x, compat="torchao")
    assert float(d.scales[0, 1].float()) < E4M3_MIN_NORMAL  # subnormal E4M3 kept
    assert float(t.scales[0, 1:].float().min()) == E4M3_MIN_NORMAL
    assert torch.equal(_bytes(d)[0, 0], _bytes(t)[0, 0])


def test_all_zero_tensor():
    z = torch.zeros(2, 32)
    assert torch.equal(fake_quant(z), z)
    assert bool(torch.isnan(fake_quant(z, compat="torchao")).all())  # torchao: 0 / 0 scales


def test_reciprocal_differs_from_division_on_midpoints():
    # values on exact E2M1 midpoints after scaling: the division lands on the tie, the
    # reciprocal product a last bit off it, and the rounding goes the other way for some
    x = torch.randint(-24, 25, (512, 16), generator=torch.Generator().manual_seed(0)).float() / 4
    d, t = quantize_nvfp4(x), quantize_nvfp4(x, compat="torchao")
    assert torch.equal(_bytes(d), _bytes(t))
    assert not torch.equal(d.codes, t.codes)
    assert int((d.codes != t.codes).sum()) < x.numel() // 4


def test_bad_compat():
    with pytest.raises(ValueError, match="compat"):
        quantize_nvfp4(torch.randn(2, 16), compat="te")


#: where `make setup` installs torchao (--target, out of site-packages: see the Makefile)
TORCHAO_REF = Path(sys.prefix) / "torchao-ref"


@contextlib.contextmanager
def _torchao_on_path():
    """torchao importable for the duration: from site-packages if installed there, else from
    ``.venv/torchao-ref`` (appended to sys.path, then removed again)."""
    if importlib.util.find_spec("torchao") is not None:
        yield
        return
    if not TORCHAO_REF.is_dir():
        pytest.skip(f"torchao is not installed (make setup puts it in {TORCHAO_REF})")
    sys.path.append(str(TORCHAO_REF))
    try:
        yield
    finally:
        sys.path.remove(str(TORCHAO_REF))


def _torchao_reference(x):
    with _torchao_on_path():
        nv = importlib.import_module("torchao.prototype.mx_formats.nvfp4_tensor")
        s_t = nv.per_tensor_amax_to_scale(torch.max(torch.abs(x)))
        scales, packed = nv.nvfp4_quantize(x, 16, s_t)
    return scales, packed, s_t


def _cases():
    g = torch.Generator().manual_seed(0)
    yield "gaussian", torch.randn(1024, 1024, generator=g)
    yield "heavy rows", torch.randn(256, 512, generator=g) * torch.exp2(
        torch.rand(256, 1, generator=g) * 8)
    x = torch.randn(128, 256, generator=g)
    x[:, :16] = 0
    x[5] *= 1e-4
    yield "zero blocks, sub-2^-6 scales", x
    yield "midpoints", torch.randint(-24, 25, (256, 256), generator=g).float() / 4
    yield "bf16", torch.randn(128, 256, generator=g).to(torch.bfloat16)
    yield "all zero", torch.zeros(16, 64)


@pytest.mark.parametrize("case", [c for c, _ in _cases()])
def test_bit_exact_with_torchao(case):
    x = dict(_cases())[case]
    scales, packed, s_t = _torchao_reference(x)
    q = quantize_nvfp4(x, compat="torchao")
    assert torch.equal(_bytes(q).reshape(scales.shape), scales.view(torch.uint8))
    assert torch.equal(q.tensor_scale.view(torch.int32), s_t.view(torch.int32))
    assert torch.equal(q.packed().reshape(packed.shape), packed)
    if case != "all zero":
        assert bool(torch.isfinite(q.dequantize()).all())
    else:
        assert math.isnan(float(q.tensor_scale / q.tensor_scale))
