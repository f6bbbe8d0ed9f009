"""Run log and grid: a killed, resumed run equals an uninterrupted one; config mismatch refused."""

import json

import pytest

from icml26.algosteer.backends import Generation
from icml26.algosteer.grid import GridConfig, run_grid, sample_seed
from icml26.algosteer.runlog import RunLog
from icml26.algosteer.tasks import TASKS
from icml26.core.errors import UserError

REFS = [c for codes in TASKS["fib"].references.values() for c in codes]


class SeededStub:
    """Deterministic 'model': the reply depends only on the request's seed."""

    def __init__(self, die_after=None):
        self.calls, self.die_after = 0, die_after

    def info(self):
        return {"backend": "stub"}

    def generate(self, requests, temperature, max_new_tokens):
        self.calls += 1
        if self.die_after is not None and self.calls > self.die_after:
            raise KeyboardInterrupt  # the process is killed mid-run
        return [Generation(f"```python\n{REFS[s % len(REFS)]}```", s) for _, s in requests]


CFG = GridConfig(tasks=("fib",), cues=("none", "performance", "naming"), samples=3)


def _strip(rows):
    return sorted(
        json.dumps(
            {k: v for k, v in r.items() if k not in ("test", "large", "gen_s")}, sort_keys=True
        )
        for r in rows
    )


def test_killed_and_resumed_equals_uninterrupted(tmp_path):
    full = run_grid(SeededStub(), CFG, tmp_path / "a.jsonl", chunk=2)
    with pytest.raises(KeyboardInterrupt):
        run_grid(SeededStub(die_after=2), CFG, tmp_path / "b.jsonl", chunk=2)
    with open(tmp_path / "b.jsonl", "a") as f:
        f.write('{"key": "fib/none/9", "tor')  # a torn last line
    resumed = run_grid(SeededStub(), CFG, tmp_path / "b.jsonl", chunk=2)
    assert len(resumed) == len(full) == 9
    assert _strip(resumed) == _strip(full)
    keys = [json.loads(x)["key"] for x in (tmp_path / "b.jsonl").read_text().splitlines()[1:]]
    assert len(keys) == len(set(keys)) == 9
    # families and outcomes are real: every reference passes and is labelled
    assert {r["outcome"] for r in full} == {"pass"}
    assert {r["family"] for r in full} <= set(TASKS["fib"].families)


def test_other_config_refused_unless_forced(tmp_path):
    run_grid(SeededStub(), CFG, tmp_path / "a.jsonl")
    other = GridConfig(tasks=("fib",), cues=("none",), samples=2)
    with pytest.raises(UserError, match="another configuration"):
        run_grid(SeededStub(), other, tmp_path / "a.jsonl")
    assert len(run_grid(SeededStub(), other, tmp_path / "a.jsonl", force=True)) == 2


def test_runlog_rejects_duplicates_and_foreign_files(tmp_path):
    with RunLog(tmp_path / "r.jsonl", {"x": 1}) as log:
        log.append({"key": "k"})
        with pytest.raises(ValueError, match="already"):
            log.append({"key": "k"})
    (tmp_path / "junk.jsonl").write_text('{"a": 1}\n')
    with pytest.raises(UserError, match="not an algosteer run log"):
        RunLog(tmp_path / "junk.jsonl", {"x": 1})


def test_seeds_are_stable_and_distinct():
    assert sample_seed(0, "fib", "none", 1) == sample_seed(0, "fib", "none", 1)
    seeds = {sample_seed(0, "fib", c, i) for c in ("none", "none_resampled") for i in range(50)}
    assert len(seeds) == 100


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"tasks": ("fibo",)}, "unknown task 'fibo'.*fib"),
        ({"cues": ("perfomance",)}, "performance"),
        ({"samples": 0}, "samples"),
        ({"temperature": -1.0}, "temperature"),
    ],
)
def test_bad_grid_input(kwargs, match):
    base = {"tasks": ("fib",), "cues": ("none",)}
    with pytest.raises(UserError, match=match):
        GridConfig(**{**base, **kwargs})


def test_reuse_rescoring_grows_a_grid_without_regenerating(tmp_path):
    small = run_grid(SeededStub(), CFG, tmp_path / "a.jsonl", chunk=2)
    # grow: one more cue and one more sample; only the 7 new cells may reach the backend
    grown_cfg = GridConfig(
        tasks=("fib",), cues=("none", "performance", "naming", "team_name"), samples=4
    )
    stub = SeededStub()
    asked = []
    orig = stub.generate

    def spy(requests, temperature, max_new_tokens):
        asked.extend(s for _, s in requests)
        return orig(requests, temperature, max_new_tokens)

    stub.generate = spy
    grown = run_grid(stub, grown_cfg, tmp_path / "b.jsonl", chunk=3, reuse=[tmp_path / "a.jsonl"])
    assert len(grown) == 16 and len(asked) == 16 - 9
    by_key = {r["key"]: r for r in grown}
    for r in small:  # reused rows: same reply, re-scored to the same family and outcome
        g = by_key[r["key"]]
        assert (g["raw"], g["family"], g["outcome"]) == (r["raw"], r["family"], r["outcome"])
        assert g["gen_meta"]["reused_from"].endswith("a.jsonl")
    # another temperature (or model) is another question: nothing is reused
    hot = GridConfig(tasks=("fib",), cues=("none",), samples=2, temperature=1.2)
    stub2 = SeededStub()
    run_grid(stub2, hot, tmp_path / "c.jsonl", reuse=[tmp_path / "a.jsonl"])
    assert stub2.calls == 1
