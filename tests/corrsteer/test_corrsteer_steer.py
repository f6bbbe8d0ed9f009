import numpy as np
import pytest
import torch

from icml26.core.errors import UserError
from icml26.core.lm import tiny_llama
from icml26.corrsteer.correlate import CorrelationAccumulator
from icml26.corrsteer.mcqsteer import full_forward_logits, score_item
from icml26.corrsteer.steer import Feature, Steerer, delta_accuracy, select, side_effect_ratio


@pytest.fixture(scope="module")
def lm():
    return tiny_llama(hidden=32, layers=4, heads=4, seed=0)


def _hidden(model, ids, L):
    with torch.no_grad():
        return model(input_ids=ids, output_hidden_states=True).hidden_states[L]


def test_steerer_adds_exactly_at_last_position_and_restores(lm):
    model, _ = lm
    ids = torch.randint(0, 250, (2, 9), generator=torch.Generator().manual_seed(1))
    w_dec = torch.randn(10, 32, dtype=torch.float64)
    f = Feature(2, 7, 1.5, 0.3, w_dec[7])
    seen = {}
    block = model.model.layers[2]

    def spy(module, args, kwargs):
        seen["h"] = (args[0] if args else kwargs["hidden_states"]).clone()

    with torch.no_grad():
        clean_logits = model(input_ids=ids).logits
        h0 = _hidden(model, ids, 2)
        with Steerer(model, [f]) as s:
            handle = block.register_forward_pre_hook(spy, with_kwargs=True)  # runs after the steerer
            steered_logits = model(input_ids=ids).logits
            handle.remove()
        assert s.calls == {2: 1}
        diff = seen["h"] - h0
        torch.testing.assert_close(diff[:, -1], (1.5 * w_dec[7]).float().expand(2, 32), atol=1e-6, rtol=0)
        assert diff[:, :-1].abs().max() == 0
        assert not torch.equal(steered_logits, clean_logits)
        assert torch.equal(model(input_ids=ids).logits, clean_logits)


def test_steerer_fires_once_per_generated_token(lm):
    model, tok = lm
    model.generation_config.eos_token_id = None
    f = Feature(1, 0, 0.5, 0.1, torch.ones(32, dtype=torch.float64))
    with Steerer(model, [f]) as s:
        model.generate(input_ids=torch.tensor([[5, 6, 7]]), max_new_tokens=5, do_sample=False,
                       pad_token_id=tok.pad_token_id)
    assert s.calls == {1: 5}  # prefill + 4 cached forwards


def test_kv_cache_scoring_equals_full_forward(lm):
    model, _ = lm
    ids = torch.randint(0, 250, (12,), generator=torch.Generator().manual_seed(2))
    letters = [10, 20, 30, 40]
    deltas = {1: torch.randn(3, 32, dtype=torch.float64), 3: torch.randn(3, 32, dtype=torch.float64)}
    deltas[1][0] = 0
    deltas[3][0] = 0
    fast, got = score_item(model, ids, letters, deltas, n_rows=3, capture=[1])
    for b in range(3):
        ref = full_forward_logits(model, ids, letters, {L: v[b] for L, v in deltas.items()})
        torch.testing.assert_close(fast[b:b + 1], ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1], _hidden(model, ids[None], 1)[0, -1], atol=1e-5, rtol=1e-5)
    unsteered, _, cache = score_item(model, ids, letters, return_cache=True)
    torch.testing.assert_close(fast[:1], unsteered, atol=1e-5, rtol=1e-5)
    for _ in range(2):  # a stored prefix cache is reused without being modified
        again, _ = score_item(model, ids, letters, deltas, n_rows=3, prefix_cache=cache)
        torch.testing.assert_close(again, fast, atol=1e-6, rtol=1e-6)


def test_bad_steering_inputs(lm):
    model, _ = lm
    with pytest.raises(UserError, match="hidden size is 32"):
        Steerer(model, {1: torch.zeros(31)})
    with pytest.raises(UserError, match="out of range"):
        Steerer(model, {9: torch.zeros(32)})
    with pytest.raises(UserError, match="coefficient is nan"):
        Feature(1, 0, float("nan"), 0.0, torch.zeros(32))


def _acc_with(r_target, d=6, n=400, seed=0):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.5).astype(float)
    x = rng.random((n, d))
    for j, r in enumerate(r_target):
        x[:, j] += r * 3 * (y - 0.5)
    return CorrelationAccumulator(d).update(x, y)


def test_select_strategies():
    accs = {2: _acc_with([0.2, -0.9, 0.0]), 5: _acc_with([0.5, 0.0, -0.1], seed=1)}
    w = {L: torch.eye(6, dtype=torch.float64) for L in accs}
    [s], _ = select(accs, "S", w)
    assert (s.layer, s.index) == (2, 1) and s.r < 0 and s.coef <= 0
    a, _ = select(accs, "A", w)
    assert [(f.layer, f.index) for f in a] == [(2, 1), (5, 0)]

    def validate(systems):  # only the layer-5 positive feature helps
        return [0.6 if [(f.layer, f.index, f.r > 0) for f in sys] == [(5, 0, True)] else 0.5 for sys in systems]

    p, info = select(accs, "P", w, validate=validate)
    assert [(f.layer, f.index) for f in p] == [(5, 0)]
    assert info["val_unsteered"] == 0.5 and [c["kept"] for c in info["candidates"]] == [False, True]
    with pytest.raises(UserError, match="strategy must be"):
        select(accs, "Q", w)
    with pytest.raises(UserError, match="validation function"):
        select(accs, "P", w)


def test_side_effect_ratio_and_delta_identities():
    base = [1, 1, 0, 0, 1, 0]
    steered = [1, 0, 1, 1, 1, 0]
    assert side_effect_ratio(base, steered) == pytest.approx(1 / 3)
    assert delta_accuracy(base, steered) == pytest.approx((2 - 1) / 6)
    assert side_effect_ratio(base, base) is None
    rng = np.random.default_rng(0)
    for _ in range(50):
        b, s = rng.integers(0, 2, 30), rng.integers(0, 2, 30)
        ser = side_effect_ratio(b, s)
        if ser is not None and ser != 0.5:
            assert (ser < 0.5) == (delta_accuracy(b, s) > 0)
