"""Device placement of the selection methods (MagicPIG above all), checked without a GPU.

On a GPU the keys, queries and positions sit on ``cuda`` while a tensor (or generator draw) made
without ``device=`` lands on the CPU. The same mistake is made visible here by setting the default
device to ``meta`` (``with torch.device("meta")``) while the inputs stay on the CPU: whatever is
created without following the keys lands on ``meta`` and cannot meet them (nor be read back).
Results must also be bit-identical to a plain CPU run (the generators are seeded as before).
"""

import pytest
import torch

from icml26.binarypc.methods import METHODS, BinaryPCConfig, make_method
from icml26.binarypc.patch import sparse_decode

ELSEWHERE = torch.device("meta")
B, HQ, HKV, L, D, P = 2, 4, 2, 96, 16, 80


def _inputs(seed=5):
    g = torch.Generator().manual_seed(seed)
    keys = torch.randn(B, HKV, L, D, generator=g)
    values = torch.randn(B, HKV, L, D, generator=g)
    q = torch.randn(B, HQ, D, generator=g)
    return q, keys, values


def _magicpig(q, keys, values, k, positions=None, allowed=None, elsewhere=False):
    """prepare on the CPU as usual; ``attend`` with the default device ``meta`` if ``elsewhere``."""
    cfg = BinaryPCConfig(method="magicpig", lsh_k=3, lsh_l=20, min_collisions=2, window=8,
                         sinks=2, seed=3)
    m = make_method(cfg)
    meta = m.prepare(keys[:, :, :P], torch.Generator().manual_seed(1))
    with torch.device(ELSEWHERE if elsewhere else keys.device):
        return m.attend(q, keys, values, meta, k, D**-0.5, allowed=allowed, positions=positions)


@pytest.mark.parametrize("k", [20, 60])
@pytest.mark.parametrize("given_positions", [False, True])
def test_magicpig_follows_the_keys_device(k, given_positions):
    q, keys, values = _inputs()
    kw = {}
    if given_positions:
        pos = torch.tensor([85, 90])
        kw = {"positions": pos, "allowed": torch.arange(L)[None, :] <= pos[:, None]}
    ref_out, ref_sel = _magicpig(q, keys, values, k, **kw)
    out, sel = _magicpig(q, keys, values, k, **kw, elsewhere=True)
    assert out.device == sel.device == keys.device
    assert torch.equal(out, ref_out) and torch.equal(sel, ref_sel)


def test_magicpig_thinning_is_exercised_and_seeded_on_the_cpu():
    """k = 20 leaves no room beside the dense tokens: candidates are thinned with the CPU
    generator seeded by (seed, position), the same draws as before the device change."""
    q, keys, values = _inputs()
    _, sel = _magicpig(q, keys, values, 20)
    _, sel2 = _magicpig(q, keys, values, 20)
    assert torch.equal(sel, sel2)
    _, wide = _magicpig(q, keys, values, 10_000)
    assert (wide[..., :P].sum() > sel[..., :P].sum())  # the budget really thinned the sample


@pytest.mark.parametrize("method", METHODS)
def test_prepare_and_select_do_not_depend_on_the_default_device(method):
    """Every method's prepare + one decode step (the patch's entry, ``sparse_decode``), with the
    CPU generator of the cache: the same metadata and selection whatever the default device."""
    q, keys, values = _inputs(7)

    def step():
        m = make_method(BinaryPCConfig(method=method, backend="torch", min_remain=8))
        meta = m.prepare(keys[:, :, :P], torch.Generator().manual_seed(1))
        out, sel = sparse_decode(m, meta, P, q, keys, values, D**-0.5, 24)
        return meta, out, sel

    ref_meta, ref_out, ref_sel = step()
    with torch.device(ELSEWHERE):
        meta, out, sel = step()
    assert out.device == keys.device and torch.equal(out, ref_out) and torch.equal(sel, ref_sel)
    for name, t in ref_meta.items():
        if isinstance(t, torch.Tensor):
            assert meta[name].device == keys.device and torch.equal(meta[name], t), name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_magicpig_runs_on_the_device():
    q, keys, values = (t.cuda() for t in _inputs())
    for k in (20, 60):
        out, sel = _magicpig(q, keys, values, k)
        assert out.device.type == sel.device.type == "cuda"
        assert torch.isfinite(out).all()


def test_decode_eval_builds_its_inputs_on_the_models_device():
    """perplexity_study and passkey_study make token tensors (greedy steps, the key, the prompt):
    they must go to the model's device, not the default one (``meta`` here stands for a CUDA
    model whose inputs were built on the CPU)."""
    import numpy as np

    from icml26.binarypc import BinaryPCConfig
    from icml26.binarypc.decode_eval import passkey_config, passkey_study, perplexity_study
    from icml26.core.lm import tiny_llama

    m, tok = tiny_llama(64, 3, 4, 2, 128, 320, vocab="bytes", seed=7)
    m = m.double().eval()
    seqs = [torch.randint(3, 250, (111,), generator=torch.Generator().manual_seed(2))]
    filler = torch.tensor(tok("the quick brown fox jumps over the lazy dog. " * 40).input_ids)
    variants = {"BinaryPC": BinaryPCConfig(token_budget=16, dense_layers=(0,))}
    pk = {"BinaryPC": passkey_config(0.5, method="bpc", dense_layers=(0,), min_context=16)}
    ref = perplexity_study(m, seqs, 100, variants)
    ref_pk = passkey_study(m, tok, filler, [320], [1], pk, max_new=4)
    with ELSEWHERE:
        got = perplexity_study(m, seqs, 100, variants)
        got_pk = passkey_study(m, tok, filler, [320], [1], pk, max_new=4)
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k])
    assert got_pk == ref_pk
