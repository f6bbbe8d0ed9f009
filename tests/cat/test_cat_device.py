"""Device placement of the CAT path, checked without a GPU.

A model on a GPU with transforms built on the CPU (``build_transforms`` makes float64 CPU blocks
by design) must not mix devices. Here the model or weight sits on ``meta`` and the code runs
under ``FakeTensorMode``, whose ops check devices the way CUDA kernels do (a CPU tensor meeting a
``meta`` one raises ``FakeTensorDeviceMismatchError``; plain ``meta`` kernels do not always check).
A CPU-built ``BlockTransform`` meeting a ``meta`` weight is exactly the CPU-blocks / CUDA-weight
situation of a GPU run.
"""

import copy

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from icml26.cat.model import (
    build_transforms,
    collect_covariances,
    fake_quantize,
    load_quantized,
    save_quantized,
)
from icml26.cat.quant import QuantLinear
from icml26.cat.quarot import online_hadamard, quarot_layer_transforms, quarot_rotate_
from icml26.cat.transforms import (
    BlockTransform,
    cat_transform,
    hadamard_transform,
    random_hadamard,
    smoothquant_transform,
)
from icml26.core.lm import tiny_llama

F64 = torch.float64
META = torch.device("meta")


def strict_devices():
    """Ops on ``meta`` tensors check devices as on CUDA (real CPU tensors join as fake CPU)."""
    return FakeTensorMode(allow_non_fake_inputs=True)


def _problem(d=32, m=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(m, d, generator=g, dtype=F64)
    a = torch.randn(d, d, generator=g, dtype=F64)
    return w, a @ a.T / d + 0.1 * torch.eye(d, dtype=F64)


def _transforms():
    w, sigma = _problem()
    return {
        "cat": cat_transform([w], sigma, block=8, seed=1),
        "smoothquant": smoothquant_transform([w], torch.diagonal(sigma).sqrt()),
        "hadamard": hadamard_transform(32, 8, seed=2),
    }


@pytest.fixture(scope="module")
def tiny():
    """A float64 tiny Llama on the CPU with its calibration groups."""
    model, _ = tiny_llama(hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, seed=0, dtype=F64)
    g = torch.Generator().manual_seed(0)
    groups = collect_covariances(model, [torch.randint(0, 259, (2, 24), generator=g)])
    return model, groups


@pytest.mark.parametrize("kind", ["cat", "smoothquant", "hadamard"])
def test_cpu_transform_applies_on_the_argument_device(kind):
    t = _transforms()[kind]
    assert t.blocks.device.type == "cpu"
    w = torch.empty(24, 32, dtype=F64, device=META)
    x = torch.empty(5, 32, dtype=torch.bfloat16, device=META)
    with strict_devices():
        wi = t.inverse_into(w)
        y = t.apply(x)
    assert (wi.device, wi.dtype, wi.shape) == (META, F64, w.shape)
    assert (y.device, y.dtype, y.shape) == (META, torch.bfloat16, x.shape)


@pytest.mark.parametrize("method", ["smoothquant", "hadamard", "cat"])
def test_fake_quantize_with_cpu_transforms_on_a_device_model(tiny, method):
    """``fake_quantize`` of a model on another device with ``build_transforms``' CPU blocks,
    SmoothQuant's fusion into the RMSNorm gains / up_proj rows included (``fuse=True``)."""
    model, groups = tiny
    tr = build_transforms(model, groups, method, block=16)
    dev_model = copy.deepcopy(model).to(META)
    with strict_devices():
        fake_quantize(dev_model, 4, 4, transforms=tr, fuse=True)
    quant = [m for m in dev_model.modules() if isinstance(m, QuantLinear)]
    assert quant and all(b.device == META for m in quant for b in m.buffers())
    assert all(p.device == META for p in dev_model.parameters())
    if method == "smoothquant":  # the fuse step ran on the device
        assert any(m.transform_kind.endswith("-fused") for m in quant)


def test_quarot_rotate_on_a_device_model(tiny):
    model, _ = tiny
    dev_model = copy.deepcopy(model).to(META)
    with strict_devices():
        online = quarot_rotate_(dev_model, seed=0)
    assert all(p.device == META for p in dev_model.parameters())
    with strict_devices():  # the online transforms (CPU blocks) fold into device weights
        fake_quantize(dev_model, 4, 4, transforms=online)


def test_quarot_rotation_on_the_cpu_is_unchanged(tiny):
    """Q is moved to the weights' device only: on the CPU the rotation is bit-identical to
    the plain float64 products with the CPU-built Q."""
    model, _ = tiny
    rotated = copy.deepcopy(model)
    quarot_rotate_(rotated, seed=0)
    q = random_hadamard(32, 0)
    emb = model.model.embed_tokens.weight.to(F64) @ q
    torch.testing.assert_close(rotated.model.embed_tokens.weight, emb, rtol=0, atol=0)
    lin = model.model.layers[0].self_attn.q_proj.weight.to(F64)
    gamma = model.model.layers[0].input_layernorm.weight.to(F64)
    torch.testing.assert_close(
        rotated.model.layers[0].self_attn.q_proj.weight, (lin * gamma) @ q, rtol=0, atol=0
    )


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_load_quantized_creates_blocks_on_the_model_device(tiny, tmp_path, dtype):
    """Every tensor ``load_quantized`` creates follows the base model's device: run it with the
    default device set elsewhere (``meta``); a block made without ``device=`` lands there. In
    float64 the q/k/v linears' blocks (one shared transform) must round-trip too."""
    model, groups = tiny
    model = copy.deepcopy(model).to(dtype)
    tr = build_transforms(model, groups, "cat", block=16)
    saved = fake_quantize(copy.deepcopy(model), 4, 4, transforms=tr)
    save_quantized(saved, tmp_path / "q", {"model": None})
    with torch.device(META):
        loaded = load_quantized(tmp_path / "q", copy.deepcopy(model))
    for name, m in saved.named_modules():
        if isinstance(m, QuantLinear):
            got = loaded.get_submodule(name)
            assert got.blocks.device == got.weight.device == torch.device("cpu")
            torch.testing.assert_close(got.blocks, m.blocks, rtol=0, atol=0)
            torch.testing.assert_close(got.weight, m.weight, rtol=0, atol=0)


def test_orthogonal_transforms_invert_by_transpose():
    t = hadamard_transform(32, 8, seed=2)
    assert t.orthogonal
    assert torch.equal(t.inverse_blocks(), t.blocks.transpose(-1, -2))
    torch.testing.assert_close(t.inverse_blocks(), torch.linalg.inv(t.blocks), rtol=0, atol=1e-15)
    w, _ = _problem()
    torch.testing.assert_close(t.inverse_into(w) @ t.dense(), w, rtol=0, atol=1e-13)
    moved = t.to(META)
    assert moved.orthogonal and moved.kind == t.kind and moved.blocks.device == META
    assert online_hadamard(64, 3).orthogonal  # QuaRot's online rotations


def test_non_orthogonal_transforms_keep_the_general_inverse(tiny):
    model, _ = tiny
    for t in _transforms()["cat"], _transforms()["smoothquant"]:
        assert not t.orthogonal
        assert torch.equal(t.inverse_blocks(), torch.linalg.inv(t.blocks))
    # QuaRot's residual view Q^T diag(1/gamma) is not orthogonal; its online part is
    lt = quarot_layer_transforms(model, seed=0)
    assert not lt["model.layers.0.self_attn.q_proj"].orthogonal
    assert lt["model.layers.0.self_attn.o_proj"].orthogonal
    assert not BlockTransform(random_hadamard(8)[None]).orthogonal  # only when told


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_transforms_match_cpu(tiny):
    """On a real GPU: CPU-built transforms, fused and online, keep the CUDA model's function
    (no quantization: no rounding decision can differ), and W4A4 runs."""
    from icml26.cat.model import apply_transform

    model, groups = tiny
    ids = torch.randint(0, 259, (1, 8), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = model(input_ids=ids).logits
    for method in ("smoothquant", "hadamard", "cat"):
        tr = build_transforms(model, groups, method, block=16)
        dev = apply_transform(copy.deepcopy(model).cuda(), tr, fuse=True)
        with torch.no_grad():
            got = dev(input_ids=ids.cuda()).logits.cpu()
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5 * float(ref.abs().max()))
        q = fake_quantize(copy.deepcopy(model).cuda(), 4, 4, transforms=tr, fuse=True)
        with torch.no_grad():
            assert torch.isfinite(q(input_ids=ids.cuda()).logits).all()
    rotated = copy.deepcopy(model).cuda()
    online = quarot_rotate_(rotated, seed=0)
    rotated = apply_transform(rotated, online)
    with torch.no_grad():
        got = rotated(input_ids=ids.cuda()).logits.cpu()
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5 * float(ref.abs().max()))
