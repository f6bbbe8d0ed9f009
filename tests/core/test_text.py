"""Corpora and perplexity: a stable disjoint split; perplexity against float64 by hand."""

import math

import pytest
import torch

from icml26.core.errors import UserError
from icml26.core.lm import tiny_llama
from icml26.core.text import (
    calibration_batches,
    corpus_text,
    documents,
    perplexity,
    split_of,
    token_blocks,
    token_ids,
)


def test_split_is_disjoint_stable_and_80_10_10():
    docs = documents("wiki")
    assert len(docs) == 10033
    assert len({t for t, _, _ in docs}) == len(docs)  # one title per article: split by article
    splits = {
        s: {t for t, _, _ in docs if split_of(t) == s} for s in ("train", "validation", "test")
    }
    assert not (splits["train"] & splits["test"]) and not (splits["validation"] & splits["test"])
    assert sum(map(len, splits.values())) == len(docs)
    assert abs(len(splits["test"]) / len(docs) - 0.10) < 0.02


PINNED = {
    "Paris": "test",
    "Water": "test",
    "Mathematics": "train",
    "1931 China floods": "test",
    "Abacus": "validation",
    "Abbas Kiarostami": "validation",
}


def test_pinned_split_values():
    # SHA-256 buckets of the title: a change of the rule would silently move test text into train
    assert {t: split_of(t) for t in PINNED} == PINNED


def test_shakespeare_corpus():
    docs = documents("shakespeare")
    assert len(docs) == 38
    assert "Hamlet" in corpus_text("train", "shakespeare") + corpus_text(
        "test", "shakespeare"
    ) + corpus_text("validation", "shakespeare")
    assert "**" not in docs[0][1]


def test_bad_split_and_corpus():
    with pytest.raises(UserError, match="train, validation, test"):
        corpus_text("dev")
    with pytest.raises(UserError, match="wiki, shakespeare"):
        documents("nope")


def test_token_blocks_shape_and_shortage():
    _, tok = tiny_llama(hidden=32, layers=1, heads=2)
    blocks = token_blocks(tok, "test", 64, 5)
    assert blocks.shape == (5, 64) and blocks.dtype == torch.long
    ids = token_ids(tok, "test", max_tokens=320)
    assert torch.equal(blocks.reshape(-1), ids)
    with pytest.raises(UserError, match="fewer than"):
        token_blocks(tok, "test", 4096, 10_000)
    batches = calibration_batches(tok, 10, 32, 4, seed=1)
    assert [b.shape for b in batches] == [(4, 32), (4, 32), (2, 32)]
    again = calibration_batches(tok, 10, 32, 4, seed=1)
    assert all(torch.equal(a, b) for a, b in zip(batches, again, strict=True))


@torch.no_grad()
def _hand_nll(model, ids, seq_len, stride):
    """float64 reference: HF strided evaluation written out token by token."""
    total, count, prev_end = 0.0, 0, 0
    n = ids.numel()
    for begin in range(0, n, stride):
        end = min(begin + seq_len, n)
        x = ids[begin:end].unsqueeze(0)
        logits = model(input_ids=x).logits[0].double()
        for pos in range(max(prev_end, begin + 1), end):
            row = logits[pos - begin - 1]
            lse = math.log(sum(math.exp(v) for v in (row - row.max()).tolist())) + float(row.max())
            total += lse - float(row[ids[pos]])
            count += 1
        prev_end = end
        if end == n:
            break
    return total, count


@pytest.mark.parametrize(("seq_len", "stride", "n"), [(16, None, 70), (16, 16, 64), (16, 5, 50)])
def test_perplexity_matches_float64_hand_computation(seq_len, stride, n):
    model, tok = tiny_llama(hidden=32, layers=2, heads=4, seed=3, dtype=torch.float64)
    ids = token_ids(tok, "validation", max_tokens=n)
    res = perplexity(
        model, tok, ids=ids, seq_len=seq_len, stride=stride, max_tokens=None, batch_size=3
    )
    nll, count = _hand_nll(model, ids, seq_len, stride or seq_len)
    assert res.n_tokens == count
    assert res.nll == pytest.approx(nll, rel=1e-10)
    assert res.ppl == pytest.approx(math.exp(nll / count), rel=1e-10)


def test_random_model_perplexity_near_vocab_size():
    # an untrained tiny model is near uniform over its 259 ids
    model, tok = tiny_llama(hidden=32, layers=1, heads=2, seed=0)
    res = perplexity(model, tok, "test", seq_len=64, max_tokens=512)
    assert 150 < res.ppl < 450


def test_perplexity_bad_args():
    model, tok = tiny_llama(hidden=32, layers=1, heads=2)
    with pytest.raises(UserError, match="stride"):
        perplexity(model, tok, seq_len=16, stride=32)


def test_humaneval_prompts_are_the_164_problems():
    from icml26.core.text import humaneval_prompts

    prompts = humaneval_prompts()
    assert len(prompts) == 164 and all("def " in p for p in prompts)
    assert prompts[0].lstrip().startswith("from typing import List")
