"""Resumable `build` (stage and per-milestone checkpoints) and `run` (a shell-command agent,
continuous and isolated, interrupted by a real SIGINT and resumed) on a hand-built repository."""

import json
import signal
import subprocess
import sys

import pytest
from deepcommit_gitutil import commit

import icml26.deepcommit.verify as verify_mod
from icml26.core.errors import UserError
from icml26.deepcommit.build import build_dataset
from icml26.deepcommit.milestones import GroupConfig
from icml26.deepcommit.runner import run_dataset

CFG = GroupConfig(message=0, time=0, symbol=0)  # files only: no MiniLM in the tests


def _git(repo, *args):
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


class Stop(Exception):
    pass


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("p")
    repo = root / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    commit(repo, {"pkg/__init__.py": "", "tests/__init__.py": "", "README": "r\n"}, "base", 0)
    commit(
        repo,
        {
            "pkg/a.py": "def fa(x):\n    return x + 1\n",
            "tests/test_a.py": "from pkg.a import fa\n\ndef test_fa():\n    assert fa(1) == 2\n",
        },
        "feature a",
        10,
    )
    commit(
        repo,
        {
            "pkg/b.py": "from pkg.a import fa\n\ndef fb(x):\n    return fa(x) * 2\n",
            "tests/test_b.py": "from pkg.b import fb\n\ndef test_fb():\n    assert fb(1) == 4\n",
        },
        "feature b",
        20,
    )
    commit(
        repo,
        {
            "pkg/c.py": "from pkg.b import fb\n\ndef fc(x):\n    return fb(x) - 1\n",
            "tests/test_c.py": "from pkg.c import fc\n\ndef test_fc():\n    assert fc(1) == 3\n",
        },
        "feature c",
        30,
    )
    before = (_git(repo, "count-objects", "-v"), _git(repo, "for-each-ref"))
    return root, repo, before


@pytest.fixture(scope="module")
def data(made):
    """A build interrupted after the first verified milestone, then resumed."""
    root, repo, before = made
    out = root / "data"
    calls = []
    real = verify_mod.run_tests

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    verify_mod.run_tests = counting
    try:

        def stop(stage):
            if stage == "verify:M002":
                raise Stop

        with pytest.raises(Stop):
            build_dataset(repo, "HEAD", out, CFG, verify_tests=True, runs=1, _stop_after=stop)
        first = len(calls)
        ck = json.loads((out / ".build" / "verify.json").read_text())
        assert sorted(ck["end"]) == ["0", "1"]  # M001 (root, empty) and M002 checkpointed
        summ = build_dataset(repo, "HEAD", out, CFG, verify_tests=True, runs=1, echo=lambda s: 0)
        second = len(calls) - first
    finally:
        verify_mod.run_tests = real
    return out, summ, first, second


def test_build_resumes_from_its_checkpoints_and_leaves_the_repo_alone(made, data):
    _, repo, before = made
    out, summ, first, second = data
    assert first == 4 and second == 4  # 2 states x 1 run per milestone: nothing run twice
    assert summ["resumed"] == ["history", "milestones", "dag", "verify (2 milestones)"]
    assert not (out / ".build").exists()
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["states"]["order"] == ["M001", "M002", "M003", "M004"]
    assert _git(repo, "count-objects", "-v") == before[0]  # not even an object written
    assert _git(repo, "for-each-ref") == before[1]
    assert _git(repo, "status", "--porcelain") == ""
    assert len(_git(repo, "worktree", "list").splitlines()) == 1
    tags = _git(out / "repo.git", "tag", "--list", "milestone-*").split()
    assert "milestone-M004-end" in tags and "milestone-base" in tags
    for m, test in (("M002", "test_a"), ("M003", "test_b"), ("M004", "test_c")):
        c = json.loads((out / "test_results" / m / f"{m}_classification.json").read_text())
        assert c["NONE_TO_PASS"] == [f"tests/{test}.py::{test.replace('test_', 'test_f')}"]
    # a checkpoint of another build is discarded, not reused
    other = out.parent / "other"
    (other / ".build").mkdir(parents=True)
    (other / ".build" / "key.json").write_text('{"other": 1}')
    (other / ".build" / "history.json").write_text("{}")
    msgs = []
    s = build_dataset(repo, "HEAD", other, CFG, echo=msgs.append)
    assert s["resumed"] == [] and "starting over" in msgs[0]


def _patches(repo, data_dir, tmp):
    """The gold source patch of each milestone: what a perfect agent would write."""
    meta = json.loads((data_dir / "metadata.json").read_text())["states"]
    pdir = tmp / "patches"
    pdir.mkdir()
    for m in meta["order"]:
        diff = _git(data_dir / "repo.git", "diff", meta["start"][m], meta["end"][m], "--", "pkg")
        (pdir / f"{m}.patch").write_text(diff)
    return pdir


def test_command_agent_run_is_interrupted_by_sigint_and_resumes(made, data, tmp_path):
    _, repo, _ = made
    out = data[0]
    p = _patches(repo, out, tmp_path)
    # the agent applies the gold patch (empty ones are skipped) and logs its calls; on its
    # first visit to M003 it sends Ctrl-C (SIGINT) to the harness, as a user would
    agent = (
        f"echo {{milestone}} >> {p}/calls; "
        f"if [ -s {p}/{{milestone}}.patch ]; then git apply {p}/{{milestone}}.patch; fi; "
        f"if [ {{milestone}} = M003 ] && [ ! -e {p}/stopped ]; then "
        f"touch {p}/stopped; kill -INT $PPID; sleep 5; fi"
    )
    runs = tmp_path / "runs"
    # a background job of a non-interactive shell starts with SIGINT ignored: restore Ctrl-C
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_dataset(out, agent, runs, ("continuous",), echo=lambda s: 0)
    finally:
        signal.signal(signal.SIGINT, old)
    st = json.loads((runs / "continuous" / "state.json").read_text())
    assert st["done"] == ["M001", "M002"]
    summ = run_dataset(out, agent, runs, ("continuous", "isolated"), echo=lambda s: 0)
    calls = (p / "calls").read_text().split()
    # continuous: M001 M002 M003(interrupted) M003 M004; isolated: the 3 graded ones
    assert calls == ["M001", "M002", "M003", "M003", "M004", "M002", "M003", "M004"]
    for mode in ("continuous", "isolated"):
        assert summ["modes"][mode]["score"] == 100.0
        assert summ["modes"][mode]["resolve_rate"] == 100.0
    assert summ["continuous_over_isolated"] == 1.0
    assert (runs / "continuous" / "agent" / "M003.log").read_text().startswith("$ echo")
    o = json.loads((runs / "isolated" / "outcomes.json").read_text())
    assert o["M004"]["passed"] == [
        "tests/test_a.py::test_fa",
        "tests/test_b.py::test_fb",
        "tests/test_c.py::test_fc",
    ]
    # a finished mode is not run again
    run_dataset(out, agent, runs, ("isolated",), echo=lambda s: 0)
    assert len((p / "calls").read_text().split()) == len(calls)


def test_agent_cannot_see_future_states_and_bad_agents_are_reported(data, tmp_path):
    out = data[0]
    # the workspace holds the start state and its past only: no later state, no hidden test
    end = json.loads((out / "metadata.json").read_text())["states"]["end"]["M004"]
    assert _git(out / "repo.git", "cat-file", "-t", end).strip() == "commit"
    probe = f"! git cat-file -e {end} && test ! -e tests/test_c.py && test -e pkg/__init__.py"
    s = run_dataset(out, probe, tmp_path / "r1", ("isolated",), max_idle_rounds=1, echo=print)
    assert s["modes"]["isolated"]["submitted"] == 3
    with pytest.raises(UserError, match="not found"):
        run_dataset(out, "no-such-agent-xyz {workdir}", tmp_path / "r2", echo=print)
    s = run_dataset(out, "rm -rf .git", tmp_path / "r3", ("continuous",), echo=print)
    assert any("deleted .git" in x for x in s["modes"]["continuous"]["log"])
    s = run_dataset(out, "exit 3", tmp_path / "r4", ("continuous",), echo=print)
    log = s["modes"]["continuous"]["log"]
    assert s["modes"]["continuous"]["submitted"] == 0 and s["modes"]["continuous"]["score"] == 0
    assert log and all(x.endswith("agent gave up or failed") for x in log)
    assert log.count("M001: agent gave up or failed") == 3  # 3 rounds without a submission


def test_run_needs_a_verified_build(made, tmp_path):
    _, repo, _ = made
    build_dataset(repo, "HEAD", tmp_path / "nv", CFG, echo=lambda s: 0)
    with pytest.raises(UserError, match="--verify"):
        run_dataset(tmp_path / "nv", "true", tmp_path / "r", echo=print)


def test_cli_run_and_score(data, tmp_path):
    from typer.testing import CliRunner

    from icml26.deepcommit.cli import app

    out = data[0]
    runs = tmp_path / "runs"
    r = CliRunner().invoke(
        app,
        [
            "run",
            str(out),
            "--agent-cmd",
            "exit 3",
            "--mode",
            "both",
            "--idle-rounds",
            "1",
            "-o",
            str(runs),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "continuous: score 0.00" in r.output and "isolated: score 0.00" in r.output
    summ = json.loads((runs / "summary.json").read_text())
    assert summ["continuous_over_isolated"] is None  # isolated scored 0: no ratio
    r = CliRunner().invoke(app, ["score", str(out), str(runs / "isolated" / "outcomes.json")])
    assert json.loads(r.output) == {"score": 0.0, "resolve_rate": 0.0, "graded": 3}
    r = CliRunner().invoke(app, ["run", str(out), "--agent-cmd", "true", "--mode", "sideways"])
    assert isinstance(r.exception, UserError) and "sideways" in str(r.exception)
    r = CliRunner().invoke(app, ["run", str(out), "--agent-cmd", "true", "--agent-llm", "stub:echo"])
    assert isinstance(r.exception, UserError) and "exactly one" in str(r.exception)
    # the built-in LLM agent on a chat spec: stub:echo replies with its own prompt, whose file
    # blocks (the files that exist) merge into themselves: submitted unchanged; a prompt without
    # an existing file has no block: the agent gives up on that milestone
    llm_runs = tmp_path / "llm"
    r = CliRunner().invoke(app, ["run", str(out), "--agent-llm", "stub:echo", "--mode",
                                 "isolated", "--idle-rounds", "1", "-o", str(llm_runs)])
    assert r.exit_code == 0, r.output
    got = json.loads((llm_runs / "summary.json").read_text())
    assert got["agent"] == "LLMAgent(stub:echo, tokens=512, temperature=0.0, seed=0)"
    logs = [json.loads(p.read_text()) for p in sorted((llm_runs / "llm-agent").glob("*.json"))]
    assert len(logs) == 3 and all(d["changed"] == [] for d in logs)
    assert got["modes"]["isolated"]["submitted"] == sum(d["blocks"] > 0 for d in logs)


def test_swebench_instances_and_predictions_round_trip(made, data, tmp_path):
    """Each instance's test_patch + patch on its base_commit gives the milestone's end tree; its
    FAIL_TO_PASS tests fail with the tests alone and pass with the gold patch; a gold-patch
    agent's isolated run gives predictions equal to the gold patches."""
    from typer.testing import CliRunner

    from icml26.deepcommit.cli import app
    from icml26.deepcommit.swebench import instances

    _, repo, _ = made
    out = data[0]
    p = _patches(repo, out, tmp_path)
    agent = f"if [ -s {p}/{{milestone}}.patch ]; then git apply {p}/{{milestone}}.patch; fi"
    run_dataset(out, agent, tmp_path / "runs", ("isolated",), echo=lambda s: 0)
    r = CliRunner().invoke(app, ["export", str(out), "--swebench", "-o", str(tmp_path / "i.jsonl"),
                                 "--runs", str(tmp_path / "runs"), "--predictions",
                                 str(tmp_path / "p.jsonl"), "--model", "gold", "--repo", "me/toy"])
    assert r.exit_code == 0, r.output
    inst = [json.loads(x) for x in (tmp_path / "i.jsonl").read_text().splitlines()]
    preds = [json.loads(x) for x in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert [i["instance_id"] for i in inst] == ["me__toy__M002", "me__toy__M003", "me__toy__M004"]
    assert {i["repo"] for i in inst} == {"me/toy"}
    meta = json.loads((out / "metadata.json").read_text())["states"]
    wt = tmp_path / "wt"
    _git(out / "repo.git", "worktree", "add", "-q", "--detach", str(wt), meta["base"])
    try:
        for i in inst:
            m = i["instance_id"].rsplit("__", 1)[1]
            assert i["base_commit"] == meta["start"][m]
            assert "tests/" not in i["patch"] and "pkg/" not in i["test_patch"]
            f2p = json.loads(i["FAIL_TO_PASS"])
            assert f2p and isinstance(json.loads(i["PASS_TO_PASS"]), list)
            _git(wt, "checkout", "-q", "--detach", i["base_commit"])
            _git(wt, "clean", "-qfdx")
            subprocess.run(["git", "-C", str(wt), "apply"], input=i["test_patch"], text=True,
                           check=True)
            pytest_cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
            if m == "M004":  # the tests themselves, once (the tree equality below covers all)
                before = subprocess.run([*pytest_cmd, *f2p], cwd=wt, capture_output=True)
                assert before.returncode != 0  # the new tests fail without the change
            subprocess.run(["git", "-C", str(wt), "apply"], input=i["patch"], text=True, check=True)
            if m == "M004":
                after = subprocess.run([*pytest_cmd, *f2p, *json.loads(i["PASS_TO_PASS"])],
                                       cwd=wt, capture_output=True, text=True)
                assert after.returncode == 0, after.stdout[-2000:]
                assert len(json.loads(i["PASS_TO_PASS"])) == 2  # test_fa, test_fb keep passing
            _git(wt, "add", "-A")
            assert _git(wt, "diff", "--cached", "--stat", meta["end"][m]) == ""  # = end tree
    finally:
        _git(out / "repo.git", "worktree", "remove", "--force", str(wt))
    assert [q["instance_id"] for q in preds] == [i["instance_id"] for i in inst]
    assert all(q["model_name_or_path"] == "gold" for q in preds)
    assert [q["model_patch"] for q in preds] == [i["patch"] for i in inst]
    # errors name what is missing
    r = CliRunner().invoke(app, ["export", str(out), "-o", str(tmp_path / "x.jsonl")])
    assert r.exit_code != 0 and "--swebench" in str(r.exception)
    with pytest.raises(UserError, match="no isolated-mode patches"):
        from icml26.deepcommit.swebench import predictions

        predictions(out, tmp_path / "nothing")
    assert len(instances(out)) == 3
