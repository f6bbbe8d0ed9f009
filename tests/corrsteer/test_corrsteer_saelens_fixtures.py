"""Folders written by real SAELens v6 (``fixtures/make_saelens_fixtures.py``, sae-lens 6.54.12)
load with our ``load_sae`` and encode/decode to the outputs SAELens itself computed."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from icml26.corrsteer.sae import load_sae

FIXTURES = Path(__file__).parent / "fixtures" / "saelens_v6"
CASES = {"standard": "relu", "topk": "topk", "topk_rescaled": "topk", "jumprelu": "jumprelu",
         "jumprelu_no_bdec_in": "jumprelu"}


def test_all_fixtures_present():
    assert sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()) == sorted(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_saelens_v6_fixture_encodes_to_stored_outputs(case):
    folder = FIXTURES / case
    cfg = json.loads((folder / "cfg.json").read_text())
    assert cfg["metadata"]["sae_lens_version"].startswith("6.")
    io = load_file(str(folder / "io.safetensors"))
    sae = load_sae(folder)
    assert sae.arch == CASES[case] and sae.layer == 2 and sae.model_name == "tiny-test"
    assert sae.apply_b_dec_to_input is (case != "jumprelu_no_bdec_in")
    with torch.no_grad():
        acts = sae.encode(io["x"])
        # the same latents fire (no activation sits near a TopK or JumpReLU boundary)
        assert torch.equal(acts > 0, io["acts"] > 0)
        torch.testing.assert_close(acts, io["acts"], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(sae.decode(io["acts"]), io["recon"], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(sae.decode(io["f"]), io["decoded"], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(sae(io["x"]), io["recon"], atol=1e-5, rtol=1e-5)


def test_fixture_jumprelu_has_negative_thresholds():
    # Guards the fixture itself: with thresholds < 0, relu(h)*(h>t) and h*(h>t) differ, so the
    # test above can tell the two JumpReLU forms apart.
    w = load_file(str(FIXTURES / "jumprelu" / "sae_weights.safetensors"))
    assert (w["threshold"] < 0).any()


def test_topk_rescaled_decoder_rows_are_not_unit():
    # Guards the fixture: unequal decoder norms, so ignoring rescale_acts_by_decoder_norm fails.
    w = load_file(str(FIXTURES / "topk_rescaled" / "sae_weights.safetensors"))
    n = w["W_dec"].norm(dim=1)
    assert float(n.max() / n.min()) > 1.5


def test_fixtures_match_the_release_and_keys_the_loader_knows():
    """Fails when the fixtures are regenerated with another sae-lens whose cfg.json has keys
    ``load_sae`` has not been checked against (read them or declare them ignored first)."""
    from icml26.corrsteer.sae import CFG_KEYS, METADATA_KEYS, SAELENS_CHECKED

    for case in CASES:
        cfg = json.loads((FIXTURES / case / "cfg.json").read_text())
        assert cfg["metadata"]["sae_lens_version"] == SAELENS_CHECKED, case
        assert set(cfg) <= set(CFG_KEYS), f"{case}: unknown keys {set(cfg) - set(CFG_KEYS)}"
        assert set(cfg["metadata"]) <= set(METADATA_KEYS), f"{case}: {set(cfg['metadata']) - set(METADATA_KEYS)}"


def test_from_pretrained_goes_through_saelens_save_model(monkeypatch):
    import shutil
    import sys
    import types

    from icml26.core.errors import UserError
    from icml26.corrsteer.sae import from_pretrained

    calls = []

    class FakeLensSAE:  # the two calls from_pretrained uses, as sae-lens 6 documents them
        @classmethod
        def from_pretrained(cls, release, sae_id, device="cpu"):
            calls.append((release, sae_id, device))
            return cls()

        def save_model(self, path):
            for f in ("cfg.json", "sae_weights.safetensors"):
                shutil.copy(FIXTURES / "topk" / f, Path(path) / f)

    monkeypatch.setitem(sys.modules, "sae_lens", types.SimpleNamespace(SAE=FakeLensSAE))
    sae = from_pretrained("rel", "layer_2/x")
    assert calls == [("rel", "layer_2/x", "cpu")] and sae.arch == "topk" and sae.layer == 2
    io = load_file(str(FIXTURES / "topk" / "io.safetensors"))
    with torch.no_grad():
        torch.testing.assert_close(sae.encode(io["x"]), io["acts"], atol=1e-5, rtol=1e-5)
    monkeypatch.setitem(sys.modules, "sae_lens", None)  # not installed
    with pytest.raises(UserError, match="needs sae-lens"):
        from_pretrained("rel", "x")
