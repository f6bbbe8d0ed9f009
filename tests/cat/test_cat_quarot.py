"""QuaRot baseline: the residual-stream rotation preserves the function exactly (float64), its
per-layer view equals the rotated model layer by layer, and rotated models save and reload."""

import pytest
import torch

from icml26.cat.model import apply_transform, fake_quantize, load_quantized, save_quantized
from icml26.cat.quant import QuantLinear
from icml26.cat.quarot import quarot_layer_transforms, quarot_rotate_
from icml26.cat.sqnr import sqnr_terms
from icml26.cat.transforms import BlockTransform, random_hadamard
from icml26.core.hooks import forward_with_pre_hooks
from icml26.core.lm import tiny_llama

IDS = torch.randint(0, 250, (2, 48), generator=torch.Generator().manual_seed(1))


def _perturb(m):
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():  # non-trivial RMSNorm gains (and biases where present)
        for n, p in m.named_parameters():
            if n.endswith("bias") or "norm" in n:
                p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return m


def _llama(dtype=torch.float64):
    m = tiny_llama(hidden=48, layers=2, heads=4, kv_heads=2, ffn=96, seed=0, dtype=dtype)[0]
    return _perturb(m)


def _qwen2(dtype=torch.float64):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=259,
        hidden_size=48,
        intermediate_size=80,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    return _perturb(Qwen2ForCausalLM(cfg).to(dtype).eval())


MAKERS = {"llama": _llama, "qwen2": _qwen2}


def _rmsnorm_in_input_dtype(self, x):
    # HF's RMSNorm computes in float32 even for float64 inputs (~1e-7 error once the residual is
    # rotated); the exactness checks run it in the input's dtype, in both the reference and the
    # rotated model.
    return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


@pytest.fixture(autouse=True)
def _exact_rmsnorm(monkeypatch):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm

    for cls in (LlamaRMSNorm, Qwen2RMSNorm):
        monkeypatch.setattr(cls, "forward", _rmsnorm_in_input_dtype)


@pytest.mark.parametrize("arch", list(MAKERS))
def test_rotation_without_quantization_keeps_logits(arch):
    ref_model, m = MAKERS[arch](), MAKERS[arch]()
    n_before = sum(p.numel() for p in m.parameters())
    with torch.no_grad():
        ref = ref_model(input_ids=IDS).logits
        online = quarot_rotate_(m, seed=3)
        n_added = sum(p.numel() for p in m.parameters()) - n_before
        rotated = m(input_ids=IDS).logits  # residual rotated, o/down not yet
        apply_transform(m, online)  # + online Hadamards on o_proj / down_proj inputs
        out = m(input_ids=IDS).logits
    scale = float(ref.abs().max())
    assert (rotated - ref).abs().max() <= 1e-9 * scale
    assert (out - ref).abs().max() <= 1e-9 * scale
    # the head was untied (counted), every gain is 1, and the weights really changed
    emb, head = m.get_input_embeddings().weight, m.get_output_embeddings().weight
    assert emb.data_ptr() != head.data_ptr()
    assert n_added == head.numel() == 259 * 48
    assert all(bool((mod.weight == 1).all()) for n, mod in m.named_modules() if n.endswith("norm"))
    assert (emb - ref_model.get_input_embeddings().weight).abs().max() > 1e-2
    assert sorted({n.rsplit(".", 1)[-1] for n in online}) == ["down_proj", "o_proj"]


def test_rotation_changes_quantized_logits():  # so the equalities above can fail
    a, b = _llama(), _llama()
    fake_quantize(a, 4, 4)
    fake_quantize(b, 4, 4, transforms=quarot_rotate_(b, seed=0))
    with torch.no_grad():
        assert (a(input_ids=IDS).logits - b(input_ids=IDS).logits).abs().max() > 1e-3


def _inputs(model, names):
    seen = {}
    mods = dict(model.named_modules())

    def hook(n):
        def f(mod, args):
            seen[n] = args[0].detach().reshape(-1, args[0].shape[-1]).clone()

        return f

    forward_with_pre_hooks(model, [IDS], {mods[n]: hook(n) for n in names})
    return seen


@pytest.mark.parametrize("arch", list(MAKERS))
def test_layer_view_equals_rotated_model(arch):
    """For every linear: the rotated model's input is T x and its (folded) weight is
    R_out W T^-1, with T, R_out from quarot_layer_transforms on the unrotated model."""
    orig, rot = MAKERS[arch](), MAKERS[arch]()
    view = quarot_layer_transforms(orig, seed=7)
    names = list(view)
    assert len(names) == 14
    x_orig = _inputs(orig, names)
    apply_transform(rot, quarot_rotate_(rot, seed=7))
    x_rot = _inputs(rot, names)
    mods = dict(rot.named_modules())
    for n in names:
        t = view[n]
        w = orig.get_submodule(n).weight.detach()
        expect_w = t.inverse_into(w)
        if t.out_rotation is not None:
            expect_w = t.out_rotation @ expect_w
        q = mods[n]
        assert isinstance(q, QuantLinear)
        if q.blocks is None:  # residual readers: the rotated model's input is T x
            torch.testing.assert_close(x_rot[n], t.apply(x_orig[n]), rtol=0, atol=1e-10)
        else:  # o/down: same input, same online T
            torch.testing.assert_close(x_rot[n], x_orig[n], rtol=0, atol=1e-10)
            torch.testing.assert_close(q.blocks, t.blocks, rtol=0, atol=0)
        torch.testing.assert_close(q.weight, expect_w, rtol=0, atol=1e-10)


def test_out_rotation_keeps_alignment_and_activation_noise():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(24, 32, generator=g, dtype=torch.float64)
    x = torch.randn(500, 32, generator=g, dtype=torch.float64) * torch.linspace(0.1, 4, 32)
    t = BlockTransform(random_hadamard(32, 1)[None])
    tr = BlockTransform(t.blocks.clone())
    tr.out_rotation = random_hadamard(24, 2)  # orthogonal (24 = 12 * 2)
    a, b = sqnr_terms(w, x, None, 4, t), sqnr_terms(w, x, None, 4, tr)
    assert b["alignment"] == pytest.approx(a["alignment"], rel=1e-12)
    assert b["measured_db"] == pytest.approx(a["measured_db"], abs=1e-9)  # A-only noise: rotated
    c, d = sqnr_terms(w, x, 4, None, t), sqnr_terms(w, x, 4, None, tr)
    assert c["kappa_w"] != pytest.approx(d["kappa_w"])  # weight rows are mixed


def test_layer_view_refused_by_fake_quantize():
    m = _llama()
    with pytest.raises(ValueError, match="quarot_rotate_"):
        fake_quantize(m, 4, 4, transforms=quarot_layer_transforms(m))


def test_non_llama_refused():
    from transformers import GPT2Config, GPT2LMHeadModel

    m = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50, n_positions=32))
    with pytest.raises(ValueError, match="Llama-style"):
        quarot_rotate_(m)


def test_rotated_model_saves_and_reloads(tmp_path):
    m = _llama(torch.float32)
    fake_quantize(m, 4, 4, transforms=quarot_rotate_(m, seed=1))
    with torch.no_grad():
        ref = m(input_ids=IDS).logits
    out = save_quantized(m, tmp_path / "q", {"residual_rotation": "quarot"})
    m2 = load_quantized(out, _llama(torch.float32))
    with torch.no_grad():
        torch.testing.assert_close(m2(input_ids=IDS).logits, ref, rtol=0, atol=0)
