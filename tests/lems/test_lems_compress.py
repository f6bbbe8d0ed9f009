"""compress(): search set held out from calibration by default, n_startup_trials, new allocators,
and bad input named."""

import importlib

import pytest
import torch

from icml26.core.errors import UserError
from icml26.lems.compress import ALLOCATORS, CompressConfig, compress

# the module itself (``icml26.lems.compress`` as an attribute is the function, a lazy export)
compress_mod = importlib.import_module("icml26.lems.compress")


def _model():
    import transformers as tf

    torch.manual_seed(0)
    cfg = tf.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    return tf.LlamaForCausalLM(cfg).eval()


def _batches(n):
    gen = torch.Generator().manual_seed(0)
    return [torch.randint(0, 64, (2, 16), generator=gen) for _ in range(n)]


def test_search_set_is_disjoint_from_calibration_by_default(monkeypatch):
    seen = {}
    real_stats, real_scorer = compress_mod.collect_kfac_stats, compress_mod.KLScorer

    def stats(model, batches, **kw):
        seen["calib"] = [id(b) for b in batches]
        return real_stats(model, batches, **kw)

    def scorer(model, batches, **kw):
        seen["search"] = [id(b) for b in batches]
        return real_scorer(model, batches, **kw)

    monkeypatch.setattr(compress_mod, "collect_kfac_stats", stats)
    monkeypatch.setattr(compress_mod, "KLScorer", scorer)
    batches = _batches(9)
    rep = compress(_model(), batches, CompressConfig(target=0.6, trials=0, multiple=4))
    assert not set(seen["calib"]) & set(seen["search"])
    assert seen["search"] == [id(batches[-1])] and len(seen["calib"]) == 8  # last 9 // 8 held out
    assert rep.kept_fraction <= 0.6 and rep.config["left_factor"] == "transpose"
    # given search batches are used as they are, and every calibration batch goes to statistics
    extra = _batches(1)
    compress(_model(), batches, CompressConfig(target=0.6, trials=0, multiple=4), search_batches=extra)
    assert seen["search"] == [id(extra[0])] and len(seen["calib"]) == 9
    with pytest.raises(UserError, match="disjoint from calibration.*got 1"):
        compress(_model(), batches[:1], CompressConfig(target=0.6, trials=0, multiple=4))


def test_n_startup_trials_reaches_tpe(monkeypatch):
    import optuna

    got = {}
    real = optuna.samplers.TPESampler

    def sampler(**kw):
        got.update(kw)
        return real(**kw)

    monkeypatch.setattr(optuna.samplers, "TPESampler", sampler)
    rep = compress(_model(), _batches(4), CompressConfig(target=0.6, trials=3, n_startup_trials=1,
                                                         multiple=4))
    assert got == {"seed": 42, "n_startup_trials": 1} and len(rep.search.trials) == 3


@pytest.mark.parametrize("allocator", ["energy", "atp"])
def test_new_allocators_meet_the_budget(allocator):
    assert allocator in ALLOCATORS
    rep = compress(_model(), _batches(4), CompressConfig(target=0.6, allocator=allocator, multiple=4))
    assert 0.5 < rep.kept_fraction <= 0.6 and rep.params_after < rep.params_before


@pytest.mark.parametrize("kw,match", [
    ({"n_startup_trials": -1}, "`n_startup_trials` must be >= 0"),
    ({"trials": -2}, "`trials` must be >= 0; got -2"),
    ({"shrink_g": 1.5}, "`shrink_g` must be in"),
    ({"temperature": 0}, "`temperature` must be > 0"),
    ({"allocator": "atpp"}, "`allocator` must be one of.*'atpp'"),
    ({"left_factor": "LG"}, "`left_factor` must be one of transpose, official, identity; got 'LG'"),
])
def test_bad_config_names_the_field(kw, match):
    with pytest.raises(UserError, match=match):
        CompressConfig(**kw)


def test_from_dict_names_unknown_fields():
    with pytest.raises(UserError, match="unknown field.*trails"):
        CompressConfig.from_dict({"version": 1, "trails": 3})
    cfg = CompressConfig(n_startup_trials=2, left_factor="identity")
    assert CompressConfig.from_dict(cfg.to_dict()) == cfg
