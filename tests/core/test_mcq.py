"""core.mcq: BIG-bench reader on a fake sdist, log-prob and letter scoring vs hand computation."""

from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import pytest
import torch

from icml26.core.errors import UserError
from icml26.core.lm import tiny_llama
from icml26.core.mcq import (
    MCQItem,
    _split_space,
    bigbench_tasks,
    choice_logprobs,
    letter_prompt,
    load_bigbench,
    score_mcq,
)

GK = {"name": "gk", "append_choices_to_input": True, "examples": [
    {"input": f"Q{i}?", "target_scores": {"right": 1, "wrong": 0, "other": 0}} for i in range(10)]}
SUB = {"name": "ld", "task_prefix": "Solve.\n", "append_choices_to_input": False,
       "example_input_prefix": "\nQuestion: ", "example_output_prefix": "\nAnswer: ",
       "examples": [{"input": "x", "target_scores": {"a": 1, "b": 1, "c": 0}}]}
GEN = {"name": "arith", "examples": [{"input": "1+1", "target": "2"}]}


@pytest.fixture()
def fake_bigbench(tmp_path, monkeypatch):
    archive = tmp_path / "bigbench-1.0.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, task in [("gk", GK), ("logic/three", SUB), ("arith", GEN)]:
            data = json.dumps(task).encode()
            info = tarfile.TarInfo(f"bigbench-1.0.0/bigbench/benchmark_tasks/{name}/task.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    monkeypatch.setenv("ICML26_BIGBENCH", str(archive))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return archive


def test_reader_keeps_only_multiple_choice(fake_bigbench):
    assert bigbench_tasks() == ["gk", "logic/three"]
    items = load_bigbench("gk", max_items=4, seed=1)
    assert len(items) == 4 and len({it.id for it in items}) == 4
    for it in items:
        assert it.choices[it.answer] == "right" and sorted(it.choices) == ["other", "right", "wrong"]
        assert it.prompt.startswith("Q: Q") and it.prompt.endswith("\nA: ")
        assert "\n  choice: right" in it.prompt
    # seeded: same subset and shuffle again; a different seed permutes differently somewhere
    assert load_bigbench("gk", max_items=4, seed=1) == items
    orders = {load_bigbench("gk", seed=s)[0].choices for s in range(8)}
    assert len(orders) > 1
    [ld] = load_bigbench("logic/three", shuffle_choices=False)
    assert ld.prompt == "Solve.\n\nQuestion: x\nAnswer: " and ld.gold == {0, 1}
    with pytest.raises(UserError, match="no JSON multiple-choice task 'arith'"):
        load_bigbench("arith")


def test_missing_archive(tmp_path, monkeypatch):
    monkeypatch.setenv("ICML26_BIGBENCH", str(tmp_path / "none.tar.gz"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(UserError, match="ICML26_BIGBENCH"):
        bigbench_tasks()


def test_item_validation():
    with pytest.raises(ValueError, match="at least 2"):
        MCQItem("i", "t", "q", ("a",), 0)
    with pytest.raises(ValueError, match="out of range"):
        MCQItem("i", "t", "q", ("a", "b"), 2)


@pytest.mark.parametrize("prompt,cont,expect", [
    ("A: ", "four", ("A:", " four")), ("Answer:", "four", ("Answer:", " four")),
    ("Answer:", " four", ("Answer:", " four"))])
def test_split_space(prompt, cont, expect):
    assert _split_space(prompt, cont) == expect


@pytest.fixture(scope="module")
def lm():
    model, tok = tiny_llama(hidden=32, layers=2, heads=2, max_len=128, seed=3)
    return model.eval(), tok


def _hand_logprob(model, tok, prompt, cont):
    ctx = tok(prompt)["input_ids"]
    ids = ctx + tok(cont, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model.double()(torch.tensor([ids])).logits[0]
    model.float()
    logp = torch.log_softmax(logits, -1)
    return sum(float(logp[t - 1, ids[t]]) for t in range(len(ctx), len(ids)))


def test_choice_logprobs_match_unpadded_float64(lm):
    model, tok = lm
    prompts = ["The cat sat on the", "A", "Answer:", "x" * 40]
    conts = [" mat", " longer continuation", " B", " y"]
    got = choice_logprobs(model, tok, prompts, conts, batch_size=3)
    ref = [_hand_logprob(model, tok, p, c) for p, c in zip(prompts, conts, strict=True)]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_score_mcq_predicts_argmax(lm):
    model, tok = lm
    items = [MCQItem(f"i{k}", "t", f"question {k}", ("alpha", "be", "gamma ray"), k % 3)
             for k in range(4)]
    res = score_mcq(model, tok, items, method="logprob")
    for it, lp, p in zip(items, res.choice_logprobs, res.pred, strict=True):
        ref = [_hand_logprob(model, tok, f"Question: {it.question}\nAnswer:", " " + c)
               for c in it.choices]
        np.testing.assert_allclose(lp, ref, atol=1e-4)
        assert p == int(np.argmax(ref))
    assert res.accuracy == np.mean([p == it.answer for p, it in zip(res.pred, items, strict=True)])
    norm = score_mcq(model, tok, items, normalize="length")
    np.testing.assert_allclose(norm.choice_logprobs[0],
                               res.choice_logprobs[0] / np.array([5, 2, 9]), rtol=1e-9)
    letter = score_mcq(model, tok, items, method="letter", batch_size=2)
    for it, lp in zip(items, letter.choice_logprobs, strict=True):
        ref = [_hand_logprob(model, tok, letter_prompt(it), " " + "ABC"[i]) for i in range(3)]
        np.testing.assert_allclose(lp, ref, atol=1e-4)
    with pytest.raises(UserError, match="method"):
        score_mcq(model, tok, items, method="vote")
