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
