"""samples.jsonl in and out, and the promptfoo grid: a round trip gives the same gate outcomes and
families as the native run, bad lines are errors naming the line."""

import json

import pytest
import yaml

from icml26.algosteer.claim import analyse
from icml26.algosteer.cues import build_messages, get_cue
from icml26.algosteer.grid import GridConfig, run_grid
from icml26.algosteer.samples import (
    export_samples,
    promptfoo_config,
    read_promptfoo,
    read_samples,
    score_samples,
)
from icml26.algosteer.tasks import TASKS, get_task
from icml26.core.errors import UserError

REFS = {t: [(fam, c) for fam, codes in TASKS[t].references.items() for c in codes]
        for t in ("fib", "dedup")}
BROKEN = "def fib(n):\n    return -1\n"  # parses, fails the functional tests


class Stub:
    def info(self):
        return {"backend": "stub"}

    def generate(self, requests, temperature, max_new_tokens):
        from icml26.algosteer.backends import Generation

        out = []
        for msgs, s in requests:
            task = next(t for t in CFG.tasks for c in CFG.cues
                        if build_messages(get_task(t), get_cue(c)) == msgs)
            refs = REFS[task]
            text = f"Here you go:\n```python\n{refs[s % len(refs)][1]}```\n"
            out.append(Generation(BROKEN if s % 2 == 0 and task == "fib" else text, s))
        return out


CFG = GridConfig(tasks=("fib", "dedup"), cues=("none", "performance"), samples=2)


def _key_view(rows):
    return {r["key"]: (r["family"], r["outcome"], r["code"]) for r in rows}


def test_export_then_score_reproduces_the_native_rows(tmp_path):
    native = run_grid(Stub(), CFG, tmp_path / "native.jsonl")
    assert {r["outcome"] for r in native} == {"pass", "fail"}  # the gate has work to do
    export_samples(native, tmp_path / "samples.jsonl")
    lines = [json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert len(lines) == 8 and all(x["task_id"].startswith("algosteer/") for x in lines)
    assert {"task_id", "solution", "cue", "sample"} <= set(lines[0])
    rescored = score_samples(read_samples(tmp_path / "samples.jsonl"), tmp_path / "again.jsonl")
    assert _key_view(rescored) == _key_view(native)
    # the analysis of the rescored log equals the native one
    cfg2 = GridConfig(tasks=CFG.tasks, cues=CFG.cues, samples=2)
    t1, _ = analyse(native, cfg2, 1)
    t2, _ = analyse(rescored, cfg2, 1)
    assert [(r["task"], r["cue"], r["gated"], r["gated_shares"]) for r in t1] == [
        (r["task"], r["cue"], r["gated"], r["gated_shares"]) for r in t2
    ]


def test_completion_goes_through_extraction_and_solution_is_taken_as_given(tmp_path):
    fam, code = REFS["fib"][0]
    p = tmp_path / "s.jsonl"
    p.write_text(
        json.dumps({"task_id": "algosteer/fib", "completion": f"Sure!\n```python\n{code}```\nDone."})
        + "\n\n"  # blank lines are skipped
        + json.dumps({"task_id": "fib", "solution": code, "cue": "performance"})
        + "\n"
        + json.dumps({"task_id": "algosteer/fib", "solution": "Sure! " + code})
        + "\n"
    )
    s = read_samples(p)
    assert [(x["task"], x["cue"], x["sample"], x["kind"]) for x in s] == [
        ("fib", "none", 0, "completion"),
        ("fib", "performance", 0, "solution"),
        ("fib", "none", 1, "solution"),
    ]
    rows = {r["key"]: r for r in score_samples(s, tmp_path / "log.jsonl")}
    assert rows["fib/none/0"]["family"] == fam and rows["fib/none/0"]["outcome"] == "pass"
    assert rows["fib/performance/0"]["family"] == fam
    # a solution is not extracted: the prose makes it unparsable, not silently repaired
    assert rows["fib/none/1"]["family"] == "unparsable"
    assert rows["fib/none/1"]["outcome"] == "unparsable"
    # the recorded prompt is the cue's prompt the sample answered
    assert rows["fib/performance/0"]["prompt"] == build_messages(
        get_task("fib"), get_cue("performance")
    )


def test_scoring_resumes(tmp_path):
    fam, code = REFS["fib"][0]
    p = tmp_path / "s.jsonl"
    p.write_text("".join(json.dumps({"task_id": "fib", "solution": code}) + "\n" for _ in range(3)))
    s = read_samples(p)
    first = score_samples(s[:2] + [dict(s[2], sample=2)], tmp_path / "log.jsonl")
    again = score_samples(s, tmp_path / "log.jsonl")
    assert [r["key"] for r in again] == [r["key"] for r in first]


@pytest.mark.parametrize(
    "line, match",
    [
        ("{not json", r"s.jsonl:2: not JSON"),
        ('["a"]', r"s.jsonl:2: a sample must be a JSON object"),
        ('{"solution": "x"}', r"s.jsonl:2: 'task_id' must be a non-empty string"),
        ('{"task_id": "algosteer/nope", "solution": "x"}', r"s.jsonl:2: task_id 'algosteer/nope'"),
        ('{"task_id": "fib"}', r"s.jsonl:2: a sample needs 'solution' or 'completion'"),
        ('{"task_id": "fib", "solution": 3}', r"s.jsonl:2: 'solution' must be a string"),
        ('{"task_id": "fib", "solution": "x", "cue": "loud"}', r"s.jsonl:2: unknown cue 'loud'"),
        ('{"task_id": "fib", "solution": "x", "sample": -1}', r"s.jsonl:2: 'sample' must be"),
        ('{"task_id": "fib", "solution": "x", "sample": 0}', r"s.jsonl:2: sample fib/none/0 "
         r"already given at .*s.jsonl:1"),
    ],
)
def test_bad_sample_lines_name_the_line(tmp_path, line, match):
    p = tmp_path / "s.jsonl"
    p.write_text(json.dumps({"task_id": "fib", "solution": "x"}) + "\n" + line + "\n")
    with pytest.raises(UserError, match=match):
        read_samples(p)


def test_promptfoo_config_and_results_round_trip(tmp_path):
    cfg = promptfoo_config(("fib", "dedup"), ("none", "memo_semantic"), 4, tmp_path / "pf.yaml")
    doc = yaml.safe_load(cfg.read_text())
    assert doc["evaluateOptions"]["repeat"] == 4
    assert len(doc["tests"]) == 4
    t0 = doc["tests"][0]
    assert json.loads(t0["vars"]["messages"]) == build_messages(get_task("fib"), get_cue("none"))
    assert doc["prompts"][0]["raw"] == "{{ messages }}"
    # what `promptfoo eval --output results.json` writes (v3+: results.results), with one
    # failed provider call (no output) that is skipped
    fam, code = REFS["fib"][0]
    results = []
    for test in doc["tests"]:
        for _ in range(2):
            results.append({"vars": test["vars"], "response": {"output": f"```python\n{code}```"}})
    results.append({"vars": doc["tests"][0]["vars"], "response": {"error": "429"}, "error": "429"})
    out = tmp_path / "results.json"
    out.write_text(json.dumps({"evalId": "x", "results": {"version": 3, "results": results}}))
    s = read_promptfoo(out)
    assert len(s) == 8
    assert sorted({(x["task"], x["cue"]) for x in s}) == [
        ("dedup", "memo_semantic"), ("dedup", "none"), ("fib", "memo_semantic"), ("fib", "none")
    ]
    assert sorted(x["sample"] for x in s if x["task"] == "fib" and x["cue"] == "none") == [0, 1]


def test_promptfoo_bad_inputs(tmp_path):
    with pytest.raises(UserError, match="samples must be >= 1"):
        promptfoo_config(("fib",), ("none",), 0, tmp_path / "pf.yaml")
    with pytest.raises(UserError, match="unknown cue"):
        promptfoo_config(("fib",), ("loud",), 2, tmp_path / "pf.yaml")
    bad = tmp_path / "r.json"
    bad.write_text('{"results": 3}')
    with pytest.raises(UserError, match="r.json: no 'results.results' list"):
        read_promptfoo(bad)
    with pytest.raises(UserError, match="no such promptfoo output"):
        read_promptfoo(tmp_path / "missing.json")
