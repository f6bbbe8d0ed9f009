"""KLScorer against a float64 brute-force KL; block replay; CPU and disk offload give the same."""

import pytest
import torch

from icml26.core.lm import tiny_llama
from icml26.lems.layers import swapped_weights, target_layers
from icml26.lems.search import KLScorer


@pytest.fixture(scope="module")
def setup():
    model, _ = tiny_llama(hidden=32, layers=3, heads=2, ffn=64, seed=3, dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 256, (2, 24), generator=gen) for _ in range(3)]
    return model.eval(), batches


def _brute_kl(model, perturbed, batches, temperature, skip):
    """Mean over scored positions of sum_v p log(p / q), float64, reference p in bfloat16."""
    total, count = 0.0, 0
    with torch.no_grad():
        for ids in batches:
            lp = torch.log_softmax(model(input_ids=ids).logits[:, skip:].double() / temperature, -1)
            with perturbed():
                lq = torch.log_softmax(model(input_ids=ids).logits[:, skip:].double() / temperature, -1)
            p = lp.exp().to(torch.bfloat16).double()  # the scorer keeps p in bfloat16
            total += float((p * (lp - lq)).sum())
            count += lp.shape[0] * lp.shape[1]
    return total / count


def _perturbation(model, name, scale=3.0):
    w = model.get_submodule(name).weight.detach()
    gen = torch.Generator().manual_seed(7)
    return w + scale * w.std() * torch.randn(w.shape, generator=gen, dtype=w.dtype)


@pytest.mark.parametrize("offload", [None, "cpu", "disk"])
def test_score_equals_brute_force_and_replay_is_exact(setup, offload, tmp_path):
    model, batches = setup
    where = tmp_path / "kl" if offload == "disk" else offload
    scorer = KLScorer(model, batches, temperature=0.6, offload=where)
    assert scorer.skip == 3
    assert abs(scorer.score(model)) < 1e-6  # the dense model has KL 0
    layers = {lay.name: lay for lay in target_layers(model)}
    for name in ("model.layers.0.self_attn.q_proj", "model.layers.2.mlp.down_proj"):
        w = _perturbation(model, name)
        block = layers[name].block

        def perturbed(name=name, w=w):
            return swapped_weights(model, {name: w})

        want = _brute_kl(model, perturbed, batches, 0.6, scorer.skip)
        assert want > 1e-7
        with perturbed():
            full = scorer.score(model, start_block=0)
            replay = scorer.score(model, start_block=block)
        assert replay == pytest.approx(full, rel=1e-9, abs=1e-12)
        assert full == pytest.approx(want, rel=1e-6)
    if offload == "disk":
        assert sorted(p.name for p in where.iterdir()) == [f"batch{j}.safetensors" for j in range(3)]
        assert all(not outs for outs in scorer.block_out) and all(p is None for p in scorer.p)
    elif offload == "cpu":
        assert scorer.p[0].device.type == "cpu"


def test_disk_offload_scores_like_memory(setup, tmp_path):
    model, batches = setup
    mem = KLScorer(model, batches)
    disk = KLScorer(model, batches, offload=tmp_path / "refs")
    name = "model.layers.1.mlp.up_proj"
    with swapped_weights(model, {name: _perturbation(model, name, 5.0)}):
        assert disk.score(model, 1) == mem.score(model, 1)


def test_bad_settings_are_refused(setup):
    model, batches = setup
    with pytest.raises(ValueError, match="temperature"):
        KLScorer(model, batches, temperature=0)
    with pytest.raises(ValueError, match="skip"):
        KLScorer(model, batches, skip=23)
    with pytest.raises(ValueError, match="at least one"):
        KLScorer(model, [])
