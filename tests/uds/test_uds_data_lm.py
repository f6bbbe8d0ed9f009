"""The issue's data mix for the pretrained-LM setting: Wikipedia leads, basic arithmetic,
GSM-style word problems and HumanEval, with held-out problems that never reach the pool, and the
answer-only exact match."""

import re

import pytest
import torch

from icml26.core.lm import tiny_llama
from icml26.uds.data import (
    CODE_HELD_OUT,
    LM_FAMILIES,
    PoolConfig,
    _humaneval,
    answer_spans,
    make_pool,
    make_val,
)
from icml26.uds.loop import SFTExample, encode, evaluate


def _mix():
    return PoolConfig(
        n_train=256, n_test=96, n_val=48, dup_frac=0, noise_frac=0, families=LM_FAMILIES
    )


def test_lm_mix_pool_and_held_out_are_disjoint_and_balanced():
    pool, test = make_pool(_mix(), seed=1000)
    val = make_val(_mix(), seed=1000)
    assert (len(pool), len(test), len(val)) == (256, 96, 48)
    assert {e.source for e in pool} == set(LM_FAMILIES)
    for held in (test, val):  # balanced over the four families
        assert all(sum(e.source == f for e in held) == len(held) // 4 for f in LM_FAMILIES)
    seen = {e.prompt for e in pool}
    assert not seen & {e.prompt for e in test} and not seen & {e.prompt for e in val}
    assert not {e.prompt for e in test} & {e.prompt for e in val}
    train_code, held_code = _humaneval()
    assert len(held_code) == CODE_HELD_OUT and len(train_code) >= 20
    assert not {p for p, _ in train_code} & {p for p, _ in held_code}
    assert {e.prompt for e in test + val if e.source == "code"} <= {p for p, _ in held_code}
    assert all(e.prompt.startswith("What is ") for e in pool if e.source == "wiki")
    assert make_pool(_mix(), seed=1000) == (pool, test)


def test_generated_answers_verify():
    """Every arithmetic answer is the expression's value and every worked step of a word
    problem is correct, ending in the last computed number (a verifier written independently of
    the generator: it parses 'x op y = z' steps)."""
    pool, test = make_pool(PoolConfig(n_train=400, n_test=40, dup_frac=0, noise_frac=0,
                                      families=("arith", "gsm")), seed=5)  # fmt: skip
    ops = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__, "/": int.__floordiv__}
    n_gsm = 0
    for e in pool + test:
        if e.source == "arith":
            expr = e.prompt.removeprefix("Calculate ").removesuffix(" =")
            assert re.fullmatch(r"[-\d+*() ]+", expr)
            assert int(e.response) == eval(expr)  # noqa: S307 - digits and + - * only
            continue
        n_gsm += 1
        steps = re.findall(r"(-?\d+) ([-+*/]) (-?\d+) = (-?\d+)", e.response)
        assert steps, e.response
        for a, op, b, c in steps:
            assert ops[op](int(a), int(b)) == int(c), e.response
            if op == "/":
                assert int(a) % int(b) == 0
        assert e.response.endswith(f"The answer is {steps[-1][3]}.")
        spans = answer_spans("gsm", e.response)
        assert [e.response[a:b] for a, b in spans] == [s[3] for s in steps]
    assert n_gsm > 100
    assert answer_spans("arith", "12") is None and answer_spans("wiki", "x") is None


def test_answer_match_equals_exact_match_on_full_labels_and_is_looser_on_a_subset():
    model, tok = tiny_llama(32, 1, 2, max_len=40, seed=0)
    exs = [SFTExample(f"{i}+{i}=", f"so {2 * i}") for i in range(6)]
    enc, _ = encode(tok, exs, 24)
    ev = evaluate(model, enc, tok.pad_token_id, answer_labels=[e.labels for e in enc])
    assert ev.answer_match == ev.exact_match
    assert (
        list(ev.per_example_match) == [bool(m) for m in ev.per_example_match]
        and len(ev.per_example_match) == 6
    )
    # one answer token per example: a match needs only that token's argmax
    one = []
    for e in enc:
        last = max(i for i, x in enumerate(e.labels) if x != -100)
        one.append([x if i == last else -100 for i, x in enumerate(e.labels)])
    ev1 = evaluate(model, enc, tok.pad_token_id, answer_labels=one)
    assert ev1.answer_match >= ev.exact_match
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([enc[0].input_ids])).logits[0]
    last = max(i for i, x in enumerate(enc[0].labels) if x != -100)
    assert ev1.per_example_match[0] == bool(logits[last - 1].argmax() == enc[0].labels[last])
    with pytest.raises(ValueError, match="answer_labels"):
        evaluate(model, enc, tok.pad_token_id, answer_labels=one[:2])


def test_answer_labels_mark_the_computed_numbers():
    pytest.importorskip("transformers")
    from icml26.core.lm import load_lm
    from icml26.uds.claim import _fmt, answer_labels

    try:
        _, tok = load_lm(None)
    except Exception as exc:  # pragma: no cover - the packaged SmolLM2 is part of `make setup`
        pytest.skip(f"SmolLM2 not available: {exc}")
    exs = [SFTExample("q", "7 * 6 = 42; 42 + 5 = 47. The answer is 47.", "gsm"),
           SFTExample("Calculate 2 * 3 =", "6", "arith")]  # fmt: skip
    enc, _ = encode(tok, _fmt(exs, "smollm2"), 96)
    lab = answer_labels(tok, exs, enc)
    kept = tok.decode([x for x in lab[0] if x != -100]).replace(" ", "")
    assert kept == "4247"
    assert lab[1] == enc[1].labels  # not a word problem: the whole response


def test_evaluate_returns_per_example_results_in_input_order():
    """evaluate batches by length; its per-example loss and match must still follow the input
    order and equal one-example evaluations."""
    model, tok = tiny_llama(32, 1, 2, max_len=64, seed=0)
    exs = [SFTExample("x" * (i % 7 + 1), "y" * (i % 5 + 1)) for i in range(20)]
    enc, _ = encode(tok, exs, 40)
    ev = evaluate(model, enc, tok.pad_token_id, batch_size=3, answer_labels=[e.labels for e in enc])
    one = [evaluate(model, [e], tok.pad_token_id) for e in enc]
    assert ev.per_example_loss == pytest.approx([o.per_example_loss[0] for o in one], abs=1e-5)
    assert ev.per_example_match == tuple(o.exact_match == 1.0 for o in one)
    tot = sum(o.loss * sum(x != -100 for x in e.labels[1:]) for o, e in zip(one, enc, strict=True))
    assert ev.loss == pytest.approx(tot / sum(sum(x != -100 for x in e.labels[1:]) for e in enc))
