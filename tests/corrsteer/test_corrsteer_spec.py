import json

import pytest
import torch

from icml26.core.errors import UserError
from icml26.corrsteer.sae import SAE, save_sae
from icml26.corrsteer.spec import load_spec, save_spec
from icml26.corrsteer.steer import Feature


def test_spec_round_trip_and_guards(tmp_path):
    sae = SAE(16, 32, "topk", 4, hook="blocks.5.hook_resid_pre", model_name="m", seed=3)
    save_sae(sae, tmp_path / "L5")
    f = Feature(5, 7, -1.25, -0.4, sae.W_dec[7].detach().double())
    save_spec(tmp_path / "spec.json", [f], "m", {5: tmp_path / "L5"})
    [g] = load_spec(tmp_path / "spec.json", "m", hidden_size=16)
    assert (g.layer, g.index, g.coef) == (5, 7, -1.25)
    torch.testing.assert_close(g.vector, f.vector)
    assert "blocks.5.hook_resid_pre,7,-1.25" in (tmp_path / "spec.csv").read_text()
    with pytest.raises(UserError, match="made for model 'm'.*--force"):
        load_spec(tmp_path / "spec.json", "other")
    assert load_spec(tmp_path / "spec.json", "other", force=True)[0].index == 7
    with pytest.raises(UserError, match="hidden size 17"):
        load_spec(tmp_path / "spec.json", "m", hidden_size=17)
    spec = json.loads((tmp_path / "spec.json").read_text())
    spec["features"][0]["index"] = 32
    (tmp_path / "bad.json").write_text(json.dumps(spec))
    with pytest.raises(UserError, match="index 32 >= d_sae 32"):
        load_spec(tmp_path / "bad.json", "m")
    spec["features"][0]["index"] = 7
    spec["features"][0]["hook_name"] = "blocks.6.hook_resid_pre"
    (tmp_path / "bad.json").write_text(json.dumps(spec))
    with pytest.raises(UserError, match="is for blocks.6"):
        load_spec(tmp_path / "bad.json", "m")
    with pytest.raises(UserError, match="only SAE features"):
        save_spec(tmp_path / "x.json", [Feature(5, -1, 1.0, 0.0, torch.zeros(16), "caa")], "m", {})


def test_steering_vector_layers_patch_the_previous_block_output():
    """steering-vectors adds ``layer_activations[j]`` to decoder block j's output; at the last
    position that must equal CorrSteer adding at block j + 1's input."""
    import torch

    from icml26.core.errors import UserError
    from icml26.core.lm import tiny_llama
    from icml26.corrsteer.spec import steering_vector_layers
    from icml26.corrsteer.steer import Feature, Steerer
    from icml26.corrsteer.train import blocks

    model, _ = tiny_llama(hidden=32, layers=4, heads=4, seed=0)
    g = torch.Generator().manual_seed(0)
    feats = [Feature(2, 5, 1.5, 0.3, torch.randn(32, generator=g, dtype=torch.float64)),
             Feature(2, 7, -0.5, -0.2, torch.randn(32, generator=g, dtype=torch.float64)),
             Feature(3, 1, 2.0, 0.1, torch.randn(32, generator=g, dtype=torch.float64))]
    layers = steering_vector_layers(feats)
    assert sorted(layers) == [1, 2] and layers[1].dtype == torch.float32
    torch.testing.assert_close(layers[1], (1.5 * feats[0].direction - 0.5 * feats[1].direction).float())
    ids = torch.randint(0, 250, (1, 9), generator=g)

    def out_hook(j):
        def hook(module, args, output):
            h = output[0] if isinstance(output, tuple) else output
            h = h.clone()
            h[:, -1] += layers[j]
            return (h, *output[1:]) if isinstance(output, tuple) else h
        return hook

    handles = [blocks(model)[j].register_forward_hook(out_hook(j)) for j in layers]
    try:
        with torch.no_grad():
            theirs = model(input_ids=ids).logits
    finally:
        for h in handles:
            h.remove()
    with torch.no_grad(), Steerer(model, feats):
        ours = model(input_ids=ids).logits
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=1e-5)
    with pytest.raises(UserError, match="block 0"):
        steering_vector_layers([Feature(0, 1, 1.0, 0.1, torch.ones(32, dtype=torch.float64))])
