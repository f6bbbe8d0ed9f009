"""Hook statistics against brute-force per-token autograd; rank collapse; resumable cache."""

import math

import pytest
import torch

from icml26.core.lm import tiny_llama
from icml26.lems.layers import dense_weight, target_layers
from icml26.lems.stats import KFACStats, clip_token_grads, collect_kfac_stats


@pytest.fixture(scope="module")
def tiny():
    model, _ = tiny_llama(hidden=16, layers=2, heads=2, ffn=32, seed=1, dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 256, (2, 16), generator=gen) for _ in range(2)]
    return model.eval(), batches


def _brute(model, batches, cut_frac=0.125):
    layers = target_layers(model)
    A = {lay.name: 0 for lay in layers}
    G = {lay.name: 0 for lay in layers}
    F = {lay.name: 0 for lay in layers}
    for ids in batches:
        outs, ins = {}, {}
        hooks = []
        for lay in layers:
            def hook(mod, args, out, name=lay.name, outs=outs, ins=ins):
                out.retain_grad()
                outs[name], ins[name] = out, args[0].detach()
            hooks.append(model.get_submodule(lay.name).register_forward_hook(hook))
        for p in model.parameters():
            p.requires_grad_(True)
        model.zero_grad()
        logits = model(input_ids=ids).logits
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="sum") / ids.shape[0]
        loss.backward()
        for h in hooks:
            h.remove()
        t = ids.shape[1]
        cut = math.floor(cut_frac * t)
        for lay in layers:
            x = ins[lay.name]
            for b in range(x.shape[0]):
                for i in range(t):
                    A[lay.name] = A[lay.name] + torch.outer(x[b, i], x[b, i])
            g = outs[lay.name].grad
            for b in range(g.shape[0]):
                kept = [g[b, i] for i in range(cut, t - cut)]
                norms = [float(v.norm()) for v in kept]
                nz = [n for n in norms if n > 0]
                m = sum(nz) / len(nz)
                for v, n in zip(kept, norms, strict=True):
                    if n > 0:
                        v = v * (min(max(n, 0.1 * m), 10 * m) / n)
                    G[lay.name] = G[lay.name] + torch.outer(v, v)
            F[lay.name] = F[lay.name] + dense_weight(model.get_submodule(lay.name)).grad.pow(2).sum(1)
    for p in model.parameters():
        p.requires_grad_(False)
        p.grad = None
    return A, G, F


def test_hooks_equal_brute_force(tiny, fp32_atol):
    model, batches = tiny
    st = collect_kfac_stats(model, batches)
    A, G, F = _brute(model, batches)
    tokens = sum(b.numel() for b in batches)
    for name in A:
        # A and G are accumulated in float32 over every token: an entry is exact to the fp32
        # summation bound of the matrix's scale (sum_t |x_ti x_tj| <= max diagonal), not of itself
        # (a 3e-3 entry beside a 25.6 diagonal was off by 4e-7 on one AVX-512 CPU; a -8.9e-2 one
        # in the 5th digit on an AVX2 CPU)
        a_scale = float(A[name].diagonal().max())
        assert torch.allclose(st.input_cov(name).double(), A[name], rtol=0,
                              atol=fp32_atol(tokens, a_scale))
        g_scale = float(G[name].diagonal().max())
        assert torch.allclose(st.G[name].double(), G[name], rtol=0,
                              atol=fp32_atol(tokens, g_scale))
        assert torch.allclose(st.row_fisher[name].double(), F[name], rtol=1e-4, atol=1e-12)
    # q, k and v read the same tensor: one A, computed once
    q = "model.layers.0.self_attn.q_proj"
    assert st.a_owner["model.layers.0.self_attn.k_proj"] == q
    assert all(not p.requires_grad for p in model.parameters())
    assert st.tokens_a == 2 * 2 * 16 and st.tokens_g == 2 * 2 * (16 - 2 * 2)


def test_clip_token_grads_bounds():
    gen = torch.Generator().manual_seed(2)
    g = torch.randn(3, 20, 5, generator=gen) * torch.logspace(-3, 3, 20).view(1, 20, 1)
    g[0, 4] = 0
    out = clip_token_grads(g)
    n_in, n_out = g.norm(dim=-1), out.norm(dim=-1)
    for b in range(3):
        nz = n_in[b] > 0
        m = n_in[b][nz].mean()
        assert torch.all(n_out[b][nz] >= 0.1 * m * (1 - 1e-5))
        assert torch.all(n_out[b][nz] <= 10 * m * (1 + 1e-5))
    assert out[0, 4].abs().sum() == 0
    # directions unchanged
    cos = torch.nn.functional.cosine_similarity(out[1], g[1], dim=-1)
    assert torch.allclose(cos, torch.ones_like(cos), atol=1e-5)


def test_per_sample_g_collapses_token_g_does_not():
    model, _ = tiny_llama(hidden=32, layers=1, heads=2, ffn=64, seed=2, dtype=torch.float64)
    gen = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, 256, (3, 48), generator=gen)]  # 3 sequences
    name = "model.layers.0.mlp.gate_proj"  # n_out = 64
    per_sample = collect_kfac_stats(model, batches, g_mode="sample").G[name]
    token = collect_kfac_stats(model, batches).G[name]
    assert int(torch.linalg.matrix_rank(per_sample.double(), rtol=1e-5)) <= 3
    assert int(torch.linalg.matrix_rank(token.double(), rtol=1e-5)) == 64


class _StopAfterOne:
    def track(self, iterable, total=None, description=""):
        for i, x in enumerate(iterable):
            if i == 1:
                raise KeyboardInterrupt
            yield x


def test_resume_from_cache_matches_one_run(tiny, tmp_path):
    model, batches = tiny
    path = tmp_path / "stats.safetensors"
    with pytest.raises(KeyboardInterrupt):
        collect_kfac_stats(model, batches, cache=path, save_every=1, progress=_StopAfterOne())
    part = KFACStats.load(path, target_layers(model))
    assert part.batches_done == 1
    resumed = collect_kfac_stats(model, batches, cache=path, save_every=1)
    fresh = collect_kfac_stats(model, batches)
    assert resumed.batches_done == 2
    for name in fresh.G:
        assert torch.allclose(resumed.G[name].double(), fresh.G[name].double(), rtol=1e-6)
    # other batches: the fingerprint differs and collection starts over
    other = collect_kfac_stats(model, batches[:1], cache=path)
    assert other.batches_done == 1 and other.fingerprint != fresh.fingerprint
