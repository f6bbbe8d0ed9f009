import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.core.errors import UserError
from icml26.core.lm import tiny_llama
from icml26.corrsteer.correlate import CorrelationAccumulator
from icml26.corrsteer.mcqsteer import (
    answer_groups,
    full_forward_logits,
    grouped_logits,
    predict,
    score_item,
)
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


def test_select_p_validates_the_coefficient_grid():
    accs = {2: _acc_with([0.2, -0.9, 0.0]), 5: _acc_with([0.5, 0.0, -0.1], seed=1)}
    w = {L: torch.eye(6, dtype=torch.float64) for L in accs}
    [base5], _ = select({5: accs[5]}, "S", w)
    seen = []

    def validate(systems):  # layer 5's positive feature helps only at 3x its coefficient
        seen.extend(systems)
        return [0.7 if len(s) == 1 and s[0].layer == 5 and np.isclose(s[0].coef, 3 * base5.coef) else 0.5
                for s in systems]

    p, info = select(accs, "P", w, validate=validate, coef_grid=(0.5, 1, 2, 3))
    assert len(seen) == 1 + 2 * 2 * 4  # unsteered + layers x signs x multipliers, one batch
    assert [(f.layer, f.index) for f in p] == [(5, 0)] and np.isclose(p[0].coef, 3 * base5.coef)
    assert [c["multiplier"] for c in info["candidates"]][1] == 3.0 and info["coef_grid"] == [0.5, 1, 2, 3]
    assert info["candidates"][1]["pos"]["val_grid"] == [0.5, 0.5, 0.5, 0.7]
    p1, _ = select(accs, "P", w, validate=validate)  # the paper's multiplier 1 alone: nothing helps
    assert p1 == []
    for bad in ((), (1.0, 0.0), (float("inf"),)):
        with pytest.raises(UserError, match="coef_grid"):
            select(accs, "P", w, validate=validate, coef_grid=bad)


class _Tok:
    """A tokenizer stand-in: token t decodes to ``vocab[t]``."""

    def __init__(self, vocab):
        self.vocab = vocab

    def __len__(self):
        return len(self.vocab)

    def decode(self, ids):
        return "".join(self.vocab[i] for i in ids)


def test_answer_groups_parse_the_first_token():
    vocab = [" A", "B", "C.", "(D)", " the", "<|im_end|>", "E", "a", "\n", " AB", "B)", "A:"]
    g = answer_groups(_Tok(vocab), 4)
    assert g.tolist() == [0, 1, 2, 3, 4, 4, 4, 4, 4, 4, 1, 0]  # E is past 4 choices; "a", "AB": no letter
    with pytest.raises(UserError, match="no token for some of the letters A..E"):
        answer_groups(_Tok([" A", "B", "C", "D"]), 5)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(2, 5), st.integers(6, 30), st.integers(0, 10_000))
def test_grouped_logits_is_the_groupwise_max(rows, n, V, seed):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, V, generator=gen, dtype=torch.float64)
    groups = torch.randint(0, n + 1, (V - 1,), generator=gen)  # one padding row past the groups
    out = grouped_logits(logits, groups, n)
    full = torch.cat([groups, torch.tensor([n])])
    for k in range(n + 1):
        members = (full == k).nonzero().flatten()
        want = logits[:, members].max(-1).values if len(members) else torch.full((rows,), float("-inf"),
                                                                                  dtype=torch.float64)
        assert torch.equal(out[:, k], want)


def test_predict_restricted_and_unrestricted():
    # columns: A B C D E other
    logits = torch.tensor([[1.0, 2.0, 0.0, 0.0, 0.0, 5.0],    # other wins: no letter
                           [1.0, 3.0, 0.0, 0.0, 9.0, 0.0],    # E is past 4 choices: folded into other
                           [4.0, 3.0, 0.0, 0.0, 0.0, 1.0]])   # a letter wins
    assert predict(logits, 4, unrestricted=True).tolist() == [-1, -1, 0]
    assert predict(logits[:, :5], 4, unrestricted=False).tolist() == [1, 1, 0]
    assert predict(logits, 5, unrestricted=True).tolist() == [-1, 4, 0]


def test_unrestricted_scoring_matches_full_forward(lm):
    model, _ = lm
    ids = torch.randint(0, 250, (10,), generator=torch.Generator().manual_seed(4))
    letters = [10, 20, 30, 40]
    groups = torch.full((256,), 4, dtype=torch.long)
    groups[torch.tensor(letters)] = torch.arange(4)
    groups[11] = 0  # a second spelling of A
    deltas = {2: torch.randn(2, 32, dtype=torch.float64)}
    fast, _ = score_item(model, ids, letters, deltas, n_rows=2, groups=groups)
    assert fast.shape == (2, 5)
    for b in range(2):
        ref = full_forward_logits(model, ids, letters, {2: deltas[2][b]}, groups=groups)
        torch.testing.assert_close(fast[b:b + 1], ref, atol=1e-5, rtol=1e-5)
        with torch.no_grad(), Steerer(model, {2: deltas[2][b]}):
            raw = model(input_ids=ids[None]).logits[0, -1]
        assert torch.isclose(fast[b, 0], torch.maximum(raw[10], raw[11]), atol=1e-5)
        others = torch.ones(raw.numel(), dtype=torch.bool)
        others[[10, 11, 20, 30, 40]] = False
        assert torch.isclose(fast[b, 4], raw[others].max(), atol=1e-5)


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
