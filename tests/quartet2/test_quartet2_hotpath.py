"""The hot path (fake quantization, MS-EDEN, the layers' forward and backward) never reads a value
back to the host, and the sync-free rewrite keeps the previous implementation's bits."""

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from icml26.core.errors import UserError
from icml26.quartet2.eden import ms_eden, ms_eden_values, random_signs
from icml26.quartet2.linear import NvidiaNVFP4Linear, QuartetIILinear
from icml26.quartet2.nvfp4 import (
    E2M1_GRID,
    e2m1_rtn,
    e2m1_sr,
    e4m3_rtn,
    fake_quant,
    quantize_nvfp4,
)


class NoHostSync(TorchDispatchMode):
    """Raises on every op that copies a tensor value to the host (``bool(t)``, ``t.item()``,
    ``float(t)``, ``nonzero``...): all of them go through these aten ops."""

    SYNC_OPS = ("_local_scalar_dense", "is_nonzero", "nonzero", "masked_select", "equal")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if any(f"aten.{op}." in name for op in self.SYNC_OPS):
            raise AssertionError(f"host sync in the hot path: {name}")
        return func(*args, **(kwargs or {}))


def test_the_sync_detector_sees_a_sync():
    x = torch.randn(4, 16)
    with pytest.raises(AssertionError, match="host sync"), NoHostSync():
        bool(torch.isfinite(x.abs().max()))  # what every quantization used to do


@pytest.mark.parametrize("cls", [QuartetIILinear, NvidiaNVFP4Linear])
def test_layers_forward_backward_make_no_host_sync(cls):
    torch.manual_seed(0)
    layer = cls(128, 128)
    x = torch.randn(200, 128)  # 200 tokens: the padded dW path too
    x[3, 5] = math.nan  # non-finite inputs take the same (masked) path
    x = x.requires_grad_()
    dy = torch.randn(200, 128)
    with NoHostSync():
        layer(x).backward(dy)
    assert x.grad.shape == x.shape and layer.weight.grad.shape == layer.weight.shape
    with NoHostSync():  # the quantizers on their own, every mode
        for mode in ("rtn", "four_over_six", "sr"):
            fake_quant(x.detach(), mode=mode, generator=torch.Generator().manual_seed(0))
        ms_eden_values(dy, random_signs(128, torch.Generator().manual_seed(0)),
                       generator=torch.Generator().manual_seed(1))


def test_hot_path_runs_on_meta_tensors():
    # meta tensors have no values: any data-dependent read would raise
    x = torch.empty(64, 128, device="meta")
    for mode in ("rtn", "four_over_six"):
        assert fake_quant(x, mode=mode).shape == x.shape
    assert fake_quant(x, mode="sr", noise=torch.empty(64, 128, device="meta")).shape == x.shape
    assert fake_quant(x, block=(16, 16)).shape == x.shape
    signs = torch.ones(128, device="meta")
    assert ms_eden_values(x, signs, scale_noise=torch.empty(64 * 8, device="meta")).shape == x.shape
    with pytest.raises(RuntimeError, match="meta"):
        fake_quant(x, check_finite=True)  # the one read, only when asked for


# --- the previous implementation, in miniature: threshold codes, table decode, materialised
# scales, a host check for non-finite values (kept to pin the bits of the rewrite)

def _old_rtn_codes(u):
    m = u.abs()
    idx = (m > 0.25).to(torch.uint8)
    for thr, strict in ((0.75, False), (1.25, True), (1.75, False), (2.5, True), (3.5, False),
                        (5.0, True)):
        idx += (m > thr) if strict else (m >= thr)
    return idx | (torch.signbit(u).to(torch.uint8) << 3)


def _old_sr_codes(u, noise):
    grid = torch.tensor(E2M1_GRID)
    mag = torch.nan_to_num(u.abs(), nan=0.0).clamp(max=6.0)
    lo = (mag >= 0.5).to(torch.uint8)
    for thr in E2M1_GRID[2:]:
        lo += mag >= thr
    hi = (lo.long() + 1).clamp(max=7)
    g_lo = torch.take(grid, lo.long())
    width = torch.take(grid, hi) - g_lo
    p_up = torch.where(width > 0, (mag - g_lo) / torch.where(width > 0, width, 1.0), 0.0)
    return (lo + ((noise < p_up) & (width > 0)).to(torch.uint8)) | (torch.signbit(u).to(torch.uint8) << 3)


def _old_decode(codes):
    pos = torch.tensor(E2M1_GRID)
    return torch.take(torch.cat([pos, -pos]), codes.long())


def _old_dequantize(q):
    s = q.scales.float() * q.tensor_scale
    s = s.repeat_interleave(q.block[0], 0).repeat_interleave(q.block[1], 1).reshape(q.codes.shape)
    out = _old_decode(q.codes) * s
    if bool(q.nonfinite.any()):
        out = torch.where(q.nonfinite, q.passthrough, out)
    return out


def _inputs():
    g = torch.Generator().manual_seed(1)
    yield torch.randn(64, 128, generator=g)
    yield torch.randn(64, 128, generator=g) * torch.exp2(torch.randint(-40, 40, (64, 1), generator=g).float())
    x = torch.randn(32, 64, generator=g)
    x[:, 16:32] = 0  # all-zero blocks
    x[3] = 0
    yield x
    yield torch.randn(32, 64, generator=g) * 1e-41  # subnormal inputs
    x = torch.randn(32, 64, generator=g) * 3e-3
    x[0, 0] = 1e4  # sub-2^-6 block scales (subnormal E4M3)
    yield x
    x = torch.randn(32, 64, generator=g)
    x[0, 3], x[1, 5], x[2, 7] = math.nan, math.inf, -math.inf
    x[4] = -0.0
    yield x
    yield torch.zeros(16, 32)
    yield torch.randint(-24, 25, (64, 64), generator=g).float() / 4  # exact E2M1 midpoints


def _bits(t):
    return t.float().view(torch.int32)


@pytest.mark.parametrize("mode", ["rtn", "sr", "four_over_six"])
@pytest.mark.parametrize("block", [(1, 16), (16, 16)])
def test_rewrite_keeps_the_bits(mode, block):
    kw = {"mode": mode, "block": block, **({"scale_override": 17 / 16} if mode == "sr" else {})}
    for x in _inputs():
        q = quantize_nvfp4(x, generator=torch.Generator().manual_seed(5), **kw)
        fq = fake_quant(x, generator=torch.Generator().manual_seed(5), **kw)
        assert torch.equal(_bits(q.dequantize()), _bits(_old_dequantize(q)))
        assert torch.equal(_bits(fq), _bits(q.dequantize()))  # the codes-free path: same bits
        assert torch.equal(q.block_scales(), (q.scales.float() * q.tensor_scale).repeat_interleave(
            block[0], 0).repeat_interleave(block[1], 1).reshape(x.shape))
        if mode == "rtn" and block == (1, 16):  # codes against the threshold rounding
            rows = x.numel() // x.shape[-1]
            finite = torch.isfinite(x)
            u = (torch.where(finite, x, 0.0).reshape(rows, -1, 16)
                 / q.block_scales().reshape(rows, -1, 16)).reshape(x.shape)
            assert torch.equal(q.codes, _old_rtn_codes(u))


def test_element_rounding_matches_the_threshold_rules():
    u = torch.cat([torch.linspace(-8, 8, 160_001),
                   torch.tensor([math.nan, -math.nan, math.inf, -math.inf, 0.0, -0.0])])
    assert torch.equal(e2m1_rtn(u), _old_rtn_codes(u))
    noise = torch.rand(u.shape, generator=torch.Generator().manual_seed(0))
    assert torch.equal(e2m1_sr(u, noise), _old_sr_codes(u, noise))


def test_ms_eden_values_equal_the_dequantized_codes():
    for x in list(_inputs())[:5]:
        if x.shape[-1] % 128:
            continue
        signs = random_signs(128, torch.Generator().manual_seed(3))
        e = ms_eden(x, signs, generator=torch.Generator().manual_seed(4))
        v = ms_eden_values(x, signs, generator=torch.Generator().manual_seed(4))
        assert torch.equal(_bits(v), _bits(e.dequantize()))
        s = e.q.scales.float() * e.q.tensor_scale
        old = _old_decode(e.q.codes) * s.repeat_interleave(16, 1).reshape(x.shape)
        assert torch.equal(_bits(old), _bits(v))


def test_check_finite_raises_and_otherwise_passes_through():
    x = torch.randn(4, 32)
    x[1, 2], x[3, 4] = math.nan, -math.inf
    with pytest.raises(UserError, match="weight has 2 non-finite"):
        fake_quant(x, check_finite=True, name="weight")
    out = fake_quant(x)
    assert math.isnan(float(out[1, 2])) and float(out[3, 4]) == -math.inf
    assert bool(torch.isfinite(out[torch.isfinite(x)]).all())
    assert float(e4m3_rtn(torch.tensor(500.0)).float()) == 448.0
