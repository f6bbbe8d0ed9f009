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
