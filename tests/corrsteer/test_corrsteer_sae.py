import json

import pytest
import torch
from safetensors.torch import save_file

from icml26.core.errors import UserError
from icml26.core.lm import tiny_llama
from icml26.corrsteer.sae import SAE, load_sae, save_sae
from icml26.corrsteer.train import TrainConfig, evaluate_sae, harvest, train_sae


def _rand_sae(arch="topk", seed=0):
    sae = SAE(16, 48, arch, k=5, hook="blocks.2.hook_resid_pre", model_name="m", seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in sae.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    return sae


@pytest.mark.parametrize("arch", ["topk", "relu", "jumprelu"])
def test_round_trip(tmp_path, arch):
    sae = _rand_sae(arch)
    save_sae(sae, tmp_path / "s")
    cfg = json.loads((tmp_path / "s" / "cfg.json").read_text())
    assert cfg["metadata"]["hook_name"] == "blocks.2.hook_resid_pre"
    assert cfg["architecture"] == {"relu": "standard"}.get(arch, arch)
    back = load_sae(tmp_path / "s")
    x = torch.randn(7, 16)
    torch.testing.assert_close(back.encode(x), sae.encode(x), rtol=0, atol=0)
    assert back.layer == 2 and back.arch == arch


def test_topk_semantics():
    sae = _rand_sae("topk")
    f = sae.encode(torch.randn(20, 16))
    assert ((f > 0).sum(-1) <= 5).all() and (f >= 0).all()


def test_old_flat_config_and_gemmascope_style(tmp_path):
    d_in, d_sae = 8, 12
    w = {"W_enc": torch.randn(d_in, d_sae), "W_dec": torch.randn(d_sae, d_in), "b_enc": torch.randn(d_sae),
         "b_dec": torch.randn(d_in), "threshold": torch.rand(d_sae)}
    save_file(w, str(tmp_path / "sae_weights.safetensors"))
    (tmp_path / "cfg.json").write_text(json.dumps({
        "architecture": "jumprelu", "d_in": d_in, "d_sae": d_sae, "hook_name": "blocks.4.hook_resid_pre",
        "model_name": "gemma-2-2b", "apply_b_dec_to_input": False}))
    sae = load_sae(tmp_path)
    x = torch.randn(3, d_in)
    h = x @ w["W_enc"] + w["b_enc"]
    torch.testing.assert_close(sae.encode(x), h * (h > w["threshold"]))
    assert sae.layer == 4 and sae.model_name == "gemma-2-2b"
    (tmp_path / "cfg.json").write_text(json.dumps({
        "d_in": d_in, "d_sae": d_sae, "hook_name": "blocks.4.hook_resid_pre",
        "activation_fn_str": "topk", "activation_fn_kwargs": {"k": 3}}))
    assert load_sae(tmp_path).k == 3


def test_bad_folders(tmp_path):
    with pytest.raises(UserError, match="missing cfg.json"):
        load_sae(tmp_path)
    sae = _rand_sae("relu")
    save_sae(sae, tmp_path)
    cfg = json.loads((tmp_path / "cfg.json").read_text())
    (tmp_path / "cfg.json").write_text(json.dumps(cfg | {"architecture": "gated"}))
    with pytest.raises(UserError, match="unknown architecture 'gated'"):
        load_sae(tmp_path)
    (tmp_path / "cfg.json").write_text(json.dumps(cfg | {"d_in": 17}))
    with pytest.raises(UserError, match="tensor 'W_enc' has shape"):
        load_sae(tmp_path)
    save_file({"W_enc": torch.zeros(16, 48)}, str(tmp_path / "sae_weights.safetensors"))
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    with pytest.raises(UserError, match="tensor 'W_dec' missing"):
        load_sae(tmp_path)
    with pytest.raises(UserError, match="unknown SAE architecture"):
        SAE(4, 8, "gated")
    with pytest.raises(UserError, match="hook_name"):
        SAE(4, 8, "relu", hook="blocks.3.hook_mlp_out")
    with pytest.raises(ValueError, match="d_in=16"):
        sae.encode(torch.zeros(2, 15))


def test_fold_input_scale_keeps_activations():
    sae = _rand_sae("topk")
    x = torch.randn(9, 16, dtype=torch.float64)
    sae = sae.double()
    s = 0.37
    f_scaled, r_scaled = sae.encode(s * x), sae(s * x)
    sae.fold_input_scale_(s)
    torch.testing.assert_close(sae.encode(x), f_scaled)
    torch.testing.assert_close(sae(x), r_scaled / s)


def test_topk_recovers_known_dictionary():
    g = torch.Generator().manual_seed(0)
    d, m, n, k = 64, 512, 30_000, 4
    atoms = torch.randn(m, d, generator=g)
    atoms /= atoms.norm(dim=1, keepdim=True)
    idx = torch.stack([torch.randperm(m, generator=g)[:k] for _ in range(n)])
    codes = torch.zeros(n, m).scatter_(1, idx, torch.rand(n, k, generator=g) + 0.5)
    x = codes @ atoms
    sae, stats = train_sae(x, TrainConfig(d_sae=m, k=k, lr=3e-3, batch_size=256, epochs=6,
                                          dead_after=20_000, seed=0))
    w = sae.W_dec.detach()
    cos = (atoms @ (w / w.norm(dim=1, keepdim=True)).T).amax(1)
    assert cos.mean() > 0.9, float(cos.mean())


def test_harvest_matches_hidden_states_and_identity_sae_is_lossless():
    model, tok = tiny_llama(hidden=32, layers=4, heads=4, seed=0)
    ids = torch.randint(0, 250, (3, 10), generator=torch.Generator().manual_seed(0))
    got = harvest(model, ids, [1, 3], batch_size=2)
    with torch.no_grad():
        hs = model(input_ids=ids, output_hidden_states=True).hidden_states
    for L in (1, 3):
        torch.testing.assert_close(got[L], hs[L][:, 1:].reshape(-1, 32))
    # relu(x) - relu(-x) = x: a 2d-latent ReLU SAE that reconstructs exactly.
    ident = SAE(32, 64, "relu", apply_b_dec_to_input=False, hook="blocks.1.hook_resid_pre")
    eye = torch.eye(32)
    with torch.no_grad():
        ident.W_enc.copy_(torch.cat([eye, -eye], 1))
        ident.W_dec.copy_(torch.cat([eye, -eye], 0))
    m = evaluate_sae(ident, got[1], model=model, ids=ids)
    assert m["explained_variance"] == pytest.approx(1.0, abs=1e-6)
    assert m["ce_sae"] == pytest.approx(m["ce_clean"], abs=1e-5)
    assert m["ce_increase"] == pytest.approx(0.0, abs=1e-5)
    with pytest.raises(UserError, match="out of range"):
        harvest(model, ids, [4])


@pytest.mark.parametrize("arch", ["topk", "relu", "jumprelu"])
def test_sae_lens_loads_our_folder(tmp_path, arch):
    # Skipped in CI (sae_lens is not a dependency); run by hand with sae-lens 6.54.12: passes.
    sae_lens = pytest.importorskip("sae_lens")
    sae = _rand_sae(arch)
    if arch == "jumprelu":
        with torch.no_grad():
            sae.threshold.copy_(torch.linspace(-0.2, 0.3, 48))
    save_sae(sae, tmp_path)
    theirs = sae_lens.SAE.load_from_disk(str(tmp_path))
    assert theirs.cfg.metadata.hook_name == "blocks.2.hook_resid_pre"
    x = torch.randn(5, 16)
    with torch.no_grad():
        torch.testing.assert_close(theirs.encode(x), sae.encode(x), atol=1e-5, rtol=1e-5)
        f = sae.encode(x)
        torch.testing.assert_close(theirs.decode(f), sae.decode(f), atol=1e-5, rtol=1e-5)
