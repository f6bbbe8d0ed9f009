"""Classifier: every reference program gets its family and passes; labels survive renaming and
reformatting; code extraction from replies; a hand-labelled fixture of real generations."""

import ast
import builtins
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.algosteer.classify import classify, extract_code, label_reply
from icml26.algosteer.tasks import TASKS, get_task
from icml26.core.errors import UserError

REFS = [
    (t, fam, code) for t in TASKS.values() for fam, codes in t.references.items() for code in codes
]


@pytest.mark.parametrize(
    ("task", "family", "code"), REFS, ids=[f"{t.name}-{f}-{i}" for i, (t, f, _) in enumerate(REFS)]
)
def test_reference_programs_get_their_family(task, family, code):
    assert classify(code, task)[0] == family


def test_every_task_has_three_references_and_every_family_one():
    for task in TASKS.values():
        assert sum(map(len, task.references.values())) >= 3
        assert set(task.references) == set(task.families), task.name


class _Rename(ast.NodeTransformer):
    """Rename every local identifier except the entry point, builtins and attributes."""

    def __init__(self, keep, suffix):
        self.keep, self.suffix = keep, suffix

    def _new(self, name):
        return name if name in self.keep else f"{name}_{self.suffix}"

    def visit_Name(self, node):
        node.id = self._new(node.id)
        return node

    def visit_arg(self, node):
        node.arg = self._new(node.arg)
        return node

    def visit_FunctionDef(self, node):
        node.name = self._new(node.name)
        self.generic_visit(node)
        return node


KEEP = set(dir(builtins)) | {
    "fib",
    "inorder",
    "dedup",
    "lru_cache",
    "functools",
    "math",
    "sqrt",
    "cache",
    "True",
    "False",
    "None",
    "phi",
    # the other tasks' entry points and the library names their families are defined by
    "RateLimiter",
    "evaluate",
    "sort_list",
    "search",
    "count_ways",
    "LRUCache",
    "primes_up_to",
    "shortest_path",
    "heapq",
    "deque",
    "OrderedDict",
    "bisect_left",
    "isqrt",
    "operator",
    "ast",
    "collections",
}


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(REFS), st.text("abcxyz", min_size=1, max_size=4), st.sampled_from([0, 1, 2]))
def test_label_invariant_under_renaming_and_reformatting(ref, suffix, style):
    task, family, code = ref
    tree = _Rename(KEEP, suffix).visit(ast.parse(code))
    new = ast.unparse(tree)
    if style == 1:  # blank lines and comments everywhere
        new = "\n\n".join(f"{line}  # c" if line.strip() else line for line in new.splitlines())
    elif style == 2:  # 2-space indent
        new = "\n".join(
            " " * ((len(line) - len(line.lstrip())) // 2) + line.lstrip()
            for line in new.splitlines()
        )
    assert classify(new, task)[0] == family


def test_extract_code_prefers_the_block_defining_the_entry():
    reply = (
        "Here you go:\n```python\nprint('usage')\n```\nand\n```python\n"
        "def fib(n):\n    return n\n```\nDone."
    )
    assert extract_code(reply, "fib").startswith("def fib(n)")
    assert extract_code(reply).startswith("print")


def test_extract_code_unclosed_fence_and_raw_text_and_truncation():
    assert "def fib" in extract_code("```python\ndef fib(n):\n    return n\n", "fib")
    assert extract_code("def fib(n):\n    return n\n", "fib") == "def fib(n):\n    return n\n"
    cut = "def fib(n):\n    return n\n\nThis function returns the n\n"
    assert extract_code(cut, "fib") == "def fib(n):\n    return n\n"
    assert extract_code("Sorry, I cannot help.", "fib") == ""


def test_unparsable_and_other():
    fib = get_task("fib")
    assert classify("", fib) == ("unparsable", "empty")
    assert classify("def fib(n:\n", fib)[0] == "unparsable"
    assert classify("def fib(n):\n    return 42\n", fib)[0] == "other"
    assert label_reply("no code at all", fib)[1] == "unparsable"


def test_get_task_suggests_near_names():
    with pytest.raises(UserError, match="did you mean fib"):
        get_task("fibb")


FIXTURE = Path(__file__).with_name("algosteer_hand_labels.jsonl")


def test_agreement_with_hand_labels():
    """Real SmolLM2 generations labelled by hand. ``dev`` rows were read while the rules were
    written (two rules were refined on them); ``heldout`` rows were labelled blind, after the
    rules were frozen, and the rules were not changed afterwards. docs/algosteer.md reports both
    agreements; the thresholds here guard against regressions."""
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]
    agree = {"dev": [], "heldout": []}
    for r in rows:
        agree[r["split"]].append(classify(r["code"], get_task(r["task"]))[0] == r["label"])
    n_all = len(rows)
    ok_all = sum(agree["dev"]) + sum(agree["heldout"])
    assert n_all >= 100 and len(agree["heldout"]) >= 30
    assert {r["task"] for r in rows if r["split"] == "heldout"} >= {"fib", "tree", "dedup"}
    assert ok_all / n_all >= 0.9, f"{ok_all}/{n_all}"
    held = sum(agree["heldout"]) / len(agree["heldout"])
    assert held >= 0.85, f"held-out {sum(agree['heldout'])}/{len(agree['heldout'])}"
