"""Docs that run (issue 40): every fenced ``icml26 …`` command and every ``python`` snippet of
README.md and docs/*.md is run here at tiny size on generated inputs, or skipped by an entry
of the explicit tables below with its reason.

Convention (docs/index.md, "Docs that run"):

- Docs stay plain Markdown, with no markers. This module decides, line by line:
  :data:`RUN` lists each runnable command exactly as the doc writes it (so a new or edited doc
  line fails :func:`test_every_documented_command_is_run_or_skipped` until it is listed, unless
  a skip pattern covers it); :data:`SKIP` maps patterns of commands that are expensive by nature (a claim run, the model
  zoo or a user's model, a GPU, a Ray cluster, Chromium, minutes of training) to the reason.
  A command that matches neither fails the test, so no doc line goes silently untested.
- A synopsis line (``[--optional]``, ``a|b`` choices, ``PATH``-like placeholders) runs as the
  concrete *instance* given in :data:`RUN`; the test checks that the instance is one the synopsis
  allows (optional parts dropped or kept, one choice taken, placeholders filled), so an instance
  cannot drift from the doc.
- Commands run in doc order, in-process through typer's ``CliRunner``, in one fresh working
  folder per doc holding the inputs the doc names (:data:`INPUTS`), so pipelines such as
  ``calibrate`` then ``test`` use the first command's output. ``--help`` variants count as
  runnable. A non-zero exit or an exception fails, showing the command and its output.
- Python snippets are named by their doc and a line they contain (:data:`SNIPPETS`): either a
  skip reason, or a *prelude* that writes the files the snippet reads and binds the names it
  leaves to the reader (``model``, ``x``, ``loader``: tiny stand-ins); the snippet then runs
  unchanged by ``exec`` in a fresh namespace in the doc's working folder.
- docs/tie.md and docs/oserve.md's commands are run by ``tests/tie/test_tie_doc_commands.py`` and
  ``tests/oserve/test_oserve_doc_commands.py`` (with output checks), so they are skipped here;
  tie.md's snippet is run there too, oserve.md's snippet here.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import tarfile
import warnings
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from icml26.cli import app

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: docs whose commands another test runs as written (with checks on their output)
COVERED = {
    "tie.md": "tests/tie/test_tie_doc_commands.py (commands and the snippet)",
    "oserve.md": "tests/oserve/test_oserve_doc_commands.py (commands; the snippet runs here)",
}


# ---------------------------------------------------------------------------------------------
# extraction


def fenced_blocks(doc: Path) -> list[tuple[str, int, str]]:
    """(info string, first line number, dedented text) of each fenced block, indented ones too."""
    out, lines, i = [], doc.read_text(encoding="utf-8").splitlines(), 0
    while i < len(lines):
        m = re.match(r"^( *)```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        indent, info, body, i = len(m.group(1)), m.group(2), [], i + 1
        start = i + 1
        while i < len(lines) and not re.match(r"^ *```\s*$", lines[i]):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        out.append((info, start, "\n".join(body) + "\n"))
        i += 1
    return out


def extract_commands(doc: Path) -> list[str]:
    """The ``icml26 …`` commands of a doc's fenced blocks (not ```python): continuation lines
    joined (a trailing backslash, or a next line that starts with an option), comments dropped,
    and a shell prompt ``$``, leading ``VAR=value`` assignments, ``wait;`` and a trailing ``&``
    taken off."""
    cmds = []
    for info, _, text in fenced_blocks(doc):
        if info == "python":
            continue
        joined: list[str] = []
        for line in text.splitlines():
            if joined and (joined[-1].endswith("\\") or re.match(r"^\s+\[?--", line)):
                joined[-1] = joined[-1].rstrip("\\").rstrip() + " " + line.strip()
            else:
                joined.append(line.rstrip())
        for line in joined:
            line = re.sub(r"\s+#.*$", "", line).strip()
            line = re.sub(r"^\$\s+", "", line)
            line = re.sub(r"^(?:\w+=\S*\s+)+", "", line)
            line = re.sub(r"^wait;\s*", "", line)
            line = re.sub(r"\s+&$", "", line)
            if line.startswith("icml26 "):
                cmds.append(re.sub(r"\s+", " ", line))
    return cmds


def python_snippets(doc: Path) -> list[tuple[int, str]]:
    return [(start, text) for info, start, text in fenced_blocks(doc) if info == "python"]


def synopsis_regex(synopsis: str) -> str:
    """A regex of the concrete commands a synopsis line allows: ``[...]`` optional (its `` | ``
    separates choices), ``a|b`` one of the choices, an all-caps word (``PATH``, ``N``) or ``...``
    any one argument."""

    def word(w: str) -> str:
        alts = []
        for alt in w.split("|"):
            if alt == "...":
                alts.append(r"\S+")
                continue
            parts = re.split(r"((?<![A-Za-z0-9_])[A-Z][A-Z_]*(?![A-Za-z0-9_]))", alt)
            alts.append("".join(r"\S+" if k % 2 else re.escape(p) for k, p in enumerate(parts)))
        return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"

    out, depth = [], 0
    for tok in re.findall(r"\[|\]|\s\|\s|\s+|[^\s\[\]]+", synopsis):
        if tok == "[":  # the space before an optional part goes inside it
            spaced = bool(out) and out[-1] == r"\s+"
            if spaced:
                out.pop()
            out.append(r"(?:\s+(?:" if spaced else "(?:(?:")
            depth += 1
        elif tok == "]":
            out.append("))?")
            depth -= 1
        elif tok.strip() == "|":
            out.append("|" if depth else r"\s+")  # top-level ` | `: the whole line's choices
        elif tok.isspace():
            out.append(r"\s+")
        else:
            out.append(word(tok))
    return "".join(out)


def is_instance(synopsis: str, cmd: str) -> bool:
    return re.fullmatch(synopsis_regex(synopsis), cmd) is not None


# ---------------------------------------------------------------------------------------------
# what runs, what does not


#: commands run here: the doc's line -> the concrete command to run (None: as written)
RUN: dict[str, str | None] = {
    # README.md
    "icml26 list": None,
    "icml26 show smollm2-perplexity": None,
    "icml26 reproduce --all --scale small --dry-run": None,
    "icml26 report --open": None,  # webbrowser.open is stubbed
    # docs/algosteer.md
    "icml26 algosteer classify reply.md --task tree --test": None,
    "icml26 algosteer stats runs.jsonl -o out/": None,
    # docs/atlas.md
    "icml26 atlas calibrate responses.csv -o bank.json --model 2PL": None,
    (
        "icml26 atlas test --bank bank.json --responses model.csv --trace t.jsonl -o results.json"
    ): None,
    "icml26 atlas score --bank bank.json --responses model.csv --method wle": None,
    "icml26 atlas calibrate responses.csv -o bank.csv": None,
    "icml26 atlas calibrate responses.csv -o bank.json --g-prior none": None,
    "icml26 atlas test --bank bank.json --responses model.csv --start max_info": None,
    "icml26 atlas from-lm-eval lm_eval_out/ -o responses.csv --metric acc": None,  # two models' folders
    "icml26 atlas convert bank.json -o bank.csv": None,
    # a file in the released ATLAS layout (mirt's coef table, header "X", ids X<k>), made by _atlas
    "icml26 atlas convert --atlas hellaswag/irt_item_parameters_combined.csv -o hellaswag.json": None,
    "icml26 atlas responses --list": None,  # a generated BIG-bench sdist ($ICML26_BIGBENCH)
    # docs/cclrec.md
    (
        "icml26 cclrec train data.inter --item data.item [--user data.user] "
        "--model cclrec|lightgcn|sgl|simgcl|rlmrec|mostpop [--split user_time|global_time|random] "
        "[--passes 100] [--device cuda] [--encoder minilm|PATH|hash] -o model/"
    ): (
        "icml26 cclrec train data.inter --item data.item --user data.user --model mostpop "
        "--split user_time --encoder hash -o model/"
    ),
    "icml26 cclrec recommend model/ --users users.txt -k 20 -o recs.csv": None,
    # docs/chemcensor.md
    "icml26 chemcensor build-db rxns.csv -o db.sqlite [--mapper given]": (
        "icml26 chemcensor build-db rxns.csv -o db.sqlite --mapper given"
    ),
    "icml26 chemcensor eval preds.csv --gold gold.csv [--db db.sqlite] --ks 1,5,10": (
        "icml26 chemcensor eval preds.csv --gold gold.csv --ks 1,5,10"
    ),
    # docs/cyberpal.md
    "icml26 cyberpal verify data.jsonl": None,  # on generated template traces
    # docs/deepcommit.md (REPO: a generated repository; my-agent: a no-op script)
    (
        "icml26 deepcommit build REPO --range v1..v2 -o DATA --verify --runs 3 --test-dir tests "
        "[--test-cmd '{python} -m pytest -q tests/x --junitxml={junit}'] [--llm local]"
    ): "icml26 deepcommit build repo --range v1..v2 -o DATA --verify --runs 3 --test-dir tests",
    "icml26 deepcommit run DATA --agent-cmd 'my-agent --task {srs}' --mode both -o RUNS": None,
    "icml26 deepcommit score DATA RUNS/continuous/outcomes.json": None,
    # docs/echo.md
    "icml26 echo knee --batch-sizes 1,8,32,128,256": None,
    # docs/quatro.md
    'icml26 quatro dual "1,0,0,0" "1,1,0,0" --delta 0.05': None,
    # docs/restore.md
    "icml26 restore make-data DIR [--scenes 50]": "icml26 restore make-data DIR --scenes 50",
    "icml26 restore reduce --n 576 --keep 64 --reducer divprune --gamma 0.5": None,
    # docs/skillpro.md
    "icml26 skillpro export pool/ -o skills/": None,
}

#: commands not run here: pattern (re.search; first match wins) -> why
SKIP: dict[str, str] = {
    r"^icml26 reproduce NAME .*--device cuda": "a GPU and the user's model",
    r"^icml26 reproduce .*--jobs ray": "a Ray cluster",
    r"^icml26 reproduce (?!.*--dry-run)": (
        "runs claims (minutes to hours at small); every landed claim runs at tiny in "
        "tests/NAME/test_NAME_claim.py, the runner in tests/core/test_runner.py"
    ),
    r"^icml26 report --pdf": "headless Chromium (tests/core/test_report_browser.py)",
    (
        r"--model (PATH|/models/|smollm2|out/)|--agent (local|\.\.\.)|--lm local"
        r"|--chat (local|http)|--writer lm|--judge http|--agent-llm (local|http)"
    ): "generates with, trains or evaluates a language model (the model zoo or the user's)",
    r"^icml26 (binarypc|corrsteer) (eval|calibrate|train-sae|eval-sae|select)\b": (
        "runs the packaged SmolLM2 over thousands of tokens (minutes on a CPU)"
    ),
    r"^icml26 echo (generate|calibrate)\b": "decodes with the packaged SmolLM2",
    r"^icml26 atlas responses --tasks": "scores BIG-bench items with the packaged SmolLM2",
    r"^icml26 lems show OUT": (
        "reads the output of `lems compress` (skipped: a model); tests/lems/test_lems_cli.py "
        "runs compress -> show on a tiny model"
    ),
    r"^icml26 quatro train\b": "40 RL steps of 256 rollouts each (minutes)",
    r"^icml26 restore build\b": "trains the claim's tiny LLaVA (1,800 steps, minutes)",
    r"^icml26 chemcensor (score|dataset|setup-mapper)\b": (
        "maps reactions with RXNMapper (an isolated transformers-4 worker that setup-mapper "
        "installs); tests/chemcensor/test_chemcensor_cli.py runs them with --mapper given"
    ),
    r"^icml26 cyberpal build --tasks (cve2cwe,cwe_qa,attack_qa --writer template|cve2cwe --rec)": (
        "embeds the whole CWE/ATT&CK catalogue with MiniLM to ground and decontaminate (~30 "
        "CPU-s each); tests/cyberpal/test_cyberpal_cli.py and test_cyberpal_ood.py build"
    ),
    r"^icml26 deepcommit (build|run|score) /tmp/dc-self": (
        "the doc's record of a run on this repository's own history (/tmp/dc-self)"
    ),
    r"^icml26 algosteer (export|score|promptfoo|stats mine)\b": (
        "the user's own logs and generations; tests/algosteer/test_algosteer_cli.py runs "
        "export, score and promptfoo on a stub grid, test_algosteer_samples.py the round trip"
    ),
    r"^icml26 cyberpal (export-hf|lm-eval-task)\b": (
        "export-hf reads a built data.jsonl (MiniLM over the catalogue); "
        "tests/cyberpal/test_cyberpal_cli.py runs both commands"
    ),
    r"^icml26 deepcommit export DATA": (
        "needs a verified build (DATA); tests/deepcommit/test_deepcommit_pipeline.py runs it"
    ),
}


# ---------------------------------------------------------------------------------------------
# inputs


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread: `make test` runs two workers on two cores (and the CPU budget holds)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _readme(tmp: Path, monkeypatch) -> None:
    from icml26.core.claims import Claim, Measure, Result, run_claim

    run_claim(
        Claim(
            "tie",
            "P",
            "S",
            "F",
            run=lambda ctx: Result(
                rows=[{"system": "a", "v": 1.0}],
                headline=Measure("h", 2.0, "x", (1.5, 2.5)),
                target=1.0,
            ),
        ),
        scale="tiny",
        out_root=tmp / "results",
    )
    import webbrowser

    monkeypatch.setattr(webbrowser, "open", lambda url, *a, **k: True)


def _algosteer(tmp: Path, monkeypatch) -> None:
    from icml26.algosteer.backends import Generation
    from icml26.algosteer.grid import GridConfig, run_grid
    from icml26.algosteer.tasks import TASKS

    (tmp / "reply.md").write_text(
        "Here:\n```python\n" + TASKS["tree"].references["morris"][0] + "```\n"
    )
    refs = [c for codes in TASKS["fib"].references.values() for c in codes]

    class Stub:
        def info(self):
            return {"backend": "stub"}

        def generate(self, requests, temperature, max_new_tokens):
            return [Generation(f"```python\n{refs[s % len(refs)]}```", s) for _, s in requests]

    run_grid(
        Stub(),
        GridConfig(tasks=("fib",), cues=("none", "none_resampled", "performance"), samples=4),
        tmp / "runs.jsonl",
    )


def _atlas(tmp: Path, monkeypatch) -> None:
    from icml26.atlas.synth import random_bank, simulate

    true = random_bank(30, "2PL", seed=1)
    R = simulate(true, np.random.default_rng(0).standard_normal(600), seed=2, missing=0.1)
    rows = ["model," + ",".join(true.ids)]
    rows += [
        f"m{m}," + ",".join("" if np.isnan(v) else str(int(v)) for v in r) for m, r in enumerate(R)
    ]
    (tmp / "responses.csv").write_text("\n".join(rows) + "\n")
    Y = simulate(true, np.array([-1.0, 1.0]), seed=3)
    lines = ["model,item,correct"] + [
        f"t{m},{i},{int(Y[m, k])}" for m in range(2) for k, i in enumerate(true.ids)
    ]
    (tmp / "model.csv").write_text("\n".join(lines) + "\n")
    for m in ("m1", "m2"):  # lm-eval --log_samples output: OUT/<model>/samples_<task>_<stamp>.jsonl
        (tmp / "lm_eval_out" / m).mkdir(parents=True)
        (tmp / "lm_eval_out" / m / "samples_arc_easy_2024-05-13T14-26-39.123456.jsonl").write_text(
            "".join(json.dumps({"doc_id": d, "acc": float((d + len(m)) % 3 == 0)}) + "\n" for d in range(8)))
    (tmp / "hellaswag").mkdir()
    (tmp / "hellaswag" / "irt_item_parameters_combined.csv").write_text(
        '"X","a1","d","g","u"\n' + "".join(f'"X{k}",{0.5 + k / 10},{k / 5 - 1},0.1,1\n' for k in range(6)))
    task = json.dumps(
        {
            "examples": [
                {
                    "input": f"Is {i} even?",
                    "target_scores": {"yes": int(i % 2 == 0), "no": int(i % 2 == 1)},
                }
                for i in range(12)
            ]
        }
    ).encode()
    with tarfile.open(tmp / "bigbench.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("bigbench/bigbench/benchmark_tasks/parity/task.json")
        info.size = len(task)
        tar.addfile(info, io.BytesIO(task))
    monkeypatch.setenv("ICML26_BIGBENCH", str(tmp / "bigbench.tar.gz"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp / "cache"))


def _cclrec(tmp: Path, monkeypatch) -> None:
    rng = np.random.default_rng(0)
    inter = ["user_id:token\titem_id:token\trating:float\ttimestamp:float"]
    for u in range(30):
        inter += [f"u{u}\ti{i}\t4\t{rng.random():.6f}" for i in rng.choice(60, 8, replace=False)]
    item = ["item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq"]
    item += [
        f"i{i}\tMovie {i}\t{1990 + i}\t{['Action', 'Comedy', 'Drama'][i % 3]}" for i in range(60)
    ]
    user = ["user_id:token\tage:token\tgender:token\toccupation:token"]
    user += [f"u{u}\t{20 + u}\t{'MF'[u % 2]}\twriter" for u in range(30)]
    (tmp / "data.inter").write_text("\n".join(inter) + "\n")
    (tmp / "data.item").write_text("\n".join(item) + "\n")
    (tmp / "data.user").write_text("\n".join(user) + "\n")
    (tmp / "users.txt").write_text("u3\nu7\n")


def _chemcensor(tmp: Path, monkeypatch) -> None:
    rxns = [
        "[CH3:1][C:2](=[O:3])[OH:4].[NH2:5][CH2:6][c:7]1[cH:8][cH:9][cH:10][cH:11][cH:12]1"
        ">>[CH3:1][C:2](=[O:3])[NH:5][CH2:6][c:7]1[cH:8][cH:9][cH:10][cH:11][cH:12]1"
    ]
    (tmp / "rxns.csv").write_text("rxn_smiles\n" + "\n".join(rxns) + "\n")
    (tmp / "gold.csv").write_text("target,reactants\nCC(=O)NCc1ccccc1,CC(=O)O.NCc1ccccc1\n")
    (tmp / "preds.csv").write_text(
        "target,reactants,rank,level\n"
        "CC(=O)NCc1ccccc1,CC(=O)Cl.NCc1ccccc1,1,3\n"
        "CC(=O)NCc1ccccc1,CC(=O)O.NCc1ccccc1,2,5\n"
    )


def _cyberpal(tmp: Path, monkeypatch) -> None:
    """data.jsonl: template traces of the three tasks (what `build` writes, without MiniLM)."""
    from icml26.cyberpal.catalog import load_attack, load_cwe
    from icml26.cyberpal.enrich import attack_qa_tasks, cwe_qa_tasks, ground, write_template
    from icml26.cyberpal.formats import default_formats

    cwe, att, fmt = load_cwe(), load_attack(), default_formats()
    recs = write_template(
        ground([{"task": "cve2cwe", "id": "CVE-2020-0001", "gold": [79], "user": "q"}], cwe), fmt
    )
    recs += write_template(ground(cwe_qa_tasks(cwe, [79, 89, 20]), cwe), fmt)
    recs += write_template(ground(attack_qa_tasks(att, ["T1003", "T1059"]), cwe, att), fmt)
    (tmp / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def _deepcommit(tmp: Path, monkeypatch) -> None:
    """repo: a package whose tags v1..v2 add two tested features; ``my-agent`` on $PATH changes
    nothing (every milestone is graded unresolved)."""
    import os
    import subprocess

    repo = tmp / "repo"
    repo.mkdir()
    for k, v in {
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "A",
        "GIT_AUTHOR_EMAIL": "a@x",
        "GIT_COMMITTER_NAME": "A",
        "GIT_COMMITTER_EMAIL": "a@x",
    }.items():
        monkeypatch.setenv(k, v)

    def git(*args, t=0):
        d = f"@{1_700_000_000 + 600 * t} +0000"
        subprocess.run(
            ["git", "-C", str(repo), *args],
            check=True,
            capture_output=True,
            env={**os.environ, "GIT_AUTHOR_DATE": d, "GIT_COMMITTER_DATE": d},
        )

    git("init", "-q", "-b", "main")
    steps = [
        {"pkg/__init__.py": "", "tests/__init__.py": ""},
        {
            "pkg/a.py": "def fa(x):\n    return x + 1\n",
            "tests/test_a.py": "from pkg.a import fa\n\ndef test_fa():\n    assert fa(1) == 2\n",
        },
        {
            "pkg/b.py": "from pkg.a import fa\n\ndef fb(x):\n    return fa(x) * 2\n",
            "tests/test_b.py": "from pkg.b import fb\n\ndef test_fb():\n    assert fb(1) == 4\n",
        },
    ]
    for t, files in enumerate(steps):
        for rel, text in files.items():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(text)
        git("add", "-A")
        git("commit", "-q", "-m", f"step {t}", t=t)
        if t in (0, 2):
            git("tag", f"v{1 + t // 2}")
    (tmp / "bin").mkdir()
    (tmp / "bin" / "my-agent").write_text("#!/bin/sh\nexit 0\n")
    (tmp / "bin" / "my-agent").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp / 'bin'}{os.pathsep}{os.environ['PATH']}")


def _skillpro(tmp: Path, monkeypatch) -> None:
    from icml26.skillpro.skill import SkillPool, save_pool

    save_pool(SkillPool.seeded(), tmp / "pool")


#: per doc: writes the inputs its commands name into the working folder
INPUTS = {
    "README.md": _readme,
    "algosteer.md": _algosteer,
    "atlas.md": _atlas,
    "cclrec.md": _cclrec,
    "chemcensor.md": _chemcensor,
    "cyberpal.md": _cyberpal,
    "deepcommit.md": _deepcommit,
    "skillpro.md": _skillpro,
}


def classify(cmd: str) -> tuple[str, str | None]:
    """("run", the command to run), ("skip", the SKIP pattern) or ("unknown", None)."""
    if cmd in RUN:
        return "run", RUN[cmd] or cmd
    pat = next((p for p in SKIP if re.search(p, cmd)), None)
    return ("skip", pat) if pat else ("unknown", None)


def _commands_to_run(doc: Path) -> list[str]:
    return [
        what for cmd in extract_commands(doc) for kind, what in [classify(cmd)] if kind == "run"
    ]


# ---------------------------------------------------------------------------------------------
# tests


def test_synopsis_instances():
    syn = "icml26 x build a.csv -o OUT [--mapper given] --model a|b [--k N | --share 0.2]"
    assert is_instance(syn, "icml26 x build a.csv -o out/ --model b")
    assert is_instance(syn, "icml26 x build a.csv -o o --mapper given --model a --k 3")
    assert is_instance(syn, "icml26 x build a.csv -o o --model a --share 0.2")
    assert not is_instance(syn, "icml26 x build a.csv -o o --model c")
    assert not is_instance(syn, "icml26 x build a.csv -o o --mapper other --model a")
    assert not is_instance(syn, "icml26 x build b.csv -o o --model a")
    assert classify("icml26 atlas frobnicate x.csv") == ("unknown", None)  # must be placed
    assert classify("icml26 reproduce tie --scale tiny")[0] == "skip"


def test_every_documented_command_is_run_or_skipped():
    unknown, seen, used = [], set(), set()
    for doc in DOCS:
        if doc.name in COVERED:
            continue
        for cmd in extract_commands(doc):
            seen.add(cmd)
            kind, what = classify(cmd)
            if kind == "unknown":
                unknown.append(f"{doc.name}: {cmd}")
            elif kind == "skip":
                used.add(what)
            else:
                assert is_instance(cmd, what), f"{doc.name}: {what!r} is not an instance of {cmd!r}"
    assert not unknown, (
        "documented commands neither run nor skipped (add them to RUN, with an "
        "instance for a synopsis, or a SKIP pattern with the reason):\n" + "\n".join(unknown)
    )
    assert not set(RUN) - seen, f"RUN lists commands no doc has any more: {set(RUN) - seen}"
    assert used == set(SKIP), f"SKIP patterns no doc line needs: {sorted(set(SKIP) - used)}"
    assert all(SKIP.values()), "every skip needs its reason"


def test_covered_docs_are_run_in_full_by_their_own_tests(doc_commands):
    """The per-doc tests read their doc with conftest's ``doc_commands``: it must see every
    command this module's reader sees."""
    for name in COVERED:
        doc = ROOT / "docs" / name
        assert doc_commands(doc) == extract_commands(doc), name


@pytest.mark.parametrize(
    "name", [d.name for d in DOCS if d.name not in COVERED and _commands_to_run(d)]
)
def test_documented_commands_run(name, tmp_path, monkeypatch):
    doc = next(d for d in DOCS if d.name == name)
    monkeypatch.chdir(tmp_path)
    if name in INPUTS:
        INPUTS[name](tmp_path, monkeypatch)
    for cmd in _commands_to_run(doc):
        r = CliRunner().invoke(app, shlex.split(cmd)[1:])
        assert r.exit_code == 0 and r.exception is None, (
            f"{name}: `{cmd}` exited {r.exit_code}\n{r.output}\n{r.exception!r}"
        )
        args = shlex.split(cmd)
        for flag, path in zip(args, args[1:], strict=False):
            if flag in ("-o", "--out"):
                assert (tmp_path / path).exists(), f"{name}: `{cmd}` wrote no {path}\n{r.output}"


# ---------------------------------------------------------------------------------------------
# Python snippets


def _tiny_model():
    from icml26.core.lm import tiny_llama

    model, tok = tiny_llama(128, 1, 4, ffn=384, max_len=64, vocab="bytes", seed=0)
    return model, tok


def _batch(n=4, t=16, seed=0):
    import torch

    ids = torch.randint(3, 200, (n, t), generator=torch.Generator().manual_seed(seed))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


def _pre_atlas(tmp, monkeypatch):
    _atlas(tmp, monkeypatch)
    rng = np.random.default_rng(5)
    return {"my_model_answers": lambda item_id: int(rng.random() < 0.6)}


def _pre_oserve(tmp, monkeypatch):
    from icml26.sim.trace import synthetic_trace, write_trace

    write_trace(
        tmp / "AzureLLMInferenceTrace_conv.csv",
        synthetic_trace(200, rate=6.0, seed=0),
        schema="azure",
    )
    return {}


def _pre_quartet2(tmp, monkeypatch):
    import torch

    g = torch.Generator().manual_seed(1)
    return {
        "x": torch.randn(8, 64, generator=g),
        "grad": torch.randn(8, 256, generator=g),
        "model": _tiny_model()[0],
    }


def _pre_gemm(tmp, monkeypatch):
    from icml26.sim import GemmEfficiency, HardwareSpec, ModelSpec

    true, peak = GemmEfficiency(0.8, 24.0, 2.0e6, 200.0), 989e12
    lines = ["M,N,K,seconds"] + [
        f"{m},{n},{k},{true.seconds(m, n, k, peak)!r}"
        for m in (1, 16, 128, 1024, 8192)
        for n in (512, 4096, 28672)
        for k in (256, 2048, 8192)
    ]
    (tmp / "h100_gemms.csv").write_text("\n".join(lines) + "\n")
    return {"model": ModelSpec.llama3_8b(), "hw": HardwareSpec.h100()}


def _pre_sso(tmp, monkeypatch):
    return {"model": _tiny_model()[0], "loader": [_batch(2, 16, s)["input_ids"] for s in (0, 1)]}


def _pre_uds(tmp, monkeypatch):
    return {
        "model": _tiny_model()[0],
        "batch": _batch(4, 16, 0),
        "micro_batches": [_batch(4, 16, s) for s in (1, 2, 3)],
    }


_LM = "loads the packaged SmolLM2 or a user's model"
#: (doc, a line of the snippet) -> a prelude (runs it) or the reason it is not run
SNIPPETS: dict[tuple[str, str], object] = {
    (
        "README.md",
        "load_lm(dtype=torch.bfloat16)",
    ): f"{_LM} (and an 8B model on CUDA), perplexity over 4,096 tokens",
    ("algosteer.md", "HFBackend("): "generates 40 samples per cell with a model on CUDA",
    ("atlas.md", 'load_responses("responses.csv")'): _pre_atlas,
    ("binarypc.md", 'load_lm("path/to/llama")'): f"{_LM}; generation with BinaryPC caches",
    ("binarypc.md", "sparse_replay(model"): f"{_LM} (continues the snippet above)",
    ("binarypc.md", "passkey_prompt(tok"): f"{_LM}: passkey generation at 512 and 1,024 tokens",
    ("cat.md", "collect_covariances(model"): f"{_LM}: covariances and SQNR over calibration text",
    (
        "cclrec.md",
        "ml100k_dir()",
    ): "trains CCLRec on MovieLens-100K with MiniLM semantics (minutes)",
    ("cclrec.md", "run_recbole("): "needs recbole 1.2.1 with its own dependencies and pandas < 3 "
    "(not project dependencies); tests/cclrec/test_cclrec_recbole.py runs the same loop on a "
    "tiny dataset where they are installed",
    ("chemcensor.md", "ReactionDB.build("): "RXNMapper (isolated transformers-4 worker) and an "
    "LLM proposer",
    ("corrsteer.md", "train_sae(x"): f"{_LM}: harvests 1,000 blocks and trains a 4,096-wide SAE",
    ("cyberpal.md", "sft(model, tok"): f"{_LM}: SFT for two epochs",
    ("deepcommit.md", 'load_history("path/to/repo"'): "a user's repository, its test suite run "
    "per milestone, and a user's agent",
    ("echo.md", "SpeculativeDecoder(model"): f"{_LM}: speculative decoding",
    ("echo.md", "echo_generate(target"): "the Qwen2.5-Coder pair of the model zoo",
    ("lems.md", "compress(model, calib"): f"{_LM}: K-FAC statistics and compression",
    ("oserve.md", "WorkloadTypes(k=4"): _pre_oserve,
    ("quartet2.md", 'quantize_nvfp4(x, mode="rtn")'): _pre_quartet2,
    ("quartet2.md", 'backend="te"'): "Transformer Engine on a Blackwell GPU (the error paths: "
    "tests/quartet2/test_quartet2_backends.py)",
    ("cat.md", "apply_transform_config(model"): "reloads a compressed-tensors export folder "
    "(tests/cat/test_cat_export.py does, on a tiny model)",
    ("quatro.md", "policy_loss(logp"): "ends in a 100-step RL run (RLLoop): minutes; "
    "tests/quatro/test_quatro_loop.py",
    ("quatro.md", "TrDualGRPOTrainer("): "a TRL GRPO training run on the user's model and dataset",
    ("restore.md", "LlavaForConditionalGeneration"): "a LLaVA model on CUDA",
    ("sim.md", "synthetic_trace(2000"): None,
    ("sim.md", "GemmEfficiency.from_profile("): _pre_gemm,
    ("skillpro.md", 'get_chat("local")'): f"{_LM}: 50 SkillPro iterations with LLM rollouts",
    ("sso.md", "sso_optimizer(model, lr=0.02, adamw_lr"): _pre_sso,
    ("sso.md", "fully_shard(model)"): "FSDP2: a torch.distributed process group (several GPUs)",
    ("tie.md", "fit_logt(lengths"): "run by tests/tie/test_tie_doc_commands.py",
    ("uds.md", "select_batch(model, batch"): _pre_uds,
    ("uds.md", "OnlineSelectionTrainer("): "an HF Trainer run on the user's model, arguments "
    "and dataset",
}


def _snippet_keys(doc: Path, text: str) -> list[tuple[str, str]]:
    return [k for k in SNIPPETS if k[0] == doc.name and k[1] in text]


def test_every_python_snippet_is_run_or_skipped():
    seen = []
    for doc in DOCS:
        for start, text in python_snippets(doc):
            keys = _snippet_keys(doc, text)
            assert len(keys) == 1, (
                f"{doc.name}:{start}: the ```python snippet matches "
                f"{keys or 'no entry'} of SNIPPETS (it needs exactly one: "
                f"a prelude or a reason):\n{text[:300]}"
            )
            seen += keys
    assert not set(SNIPPETS) - set(seen), (
        f"SNIPPETS entries no doc has: {set(SNIPPETS) - set(seen)}"
    )
    assert len(seen) == len(set(seen)), "two snippets share an entry"


def _runnable_snippets():
    for doc in DOCS:
        for start, text in python_snippets(doc):
            keys = _snippet_keys(doc, text)  # an unmatched snippet fails the test above
            if len(keys) == 1 and not isinstance(SNIPPETS[keys[0]], str):
                yield pytest.param(doc, start, text, SNIPPETS[keys[0]], id=f"{doc.name}:{start}")


@pytest.mark.parametrize("doc,start,text,prelude", list(_runnable_snippets()))
def test_python_snippet_runs(doc, start, text, prelude, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ns = {"__name__": "__doc_snippet__"}
    if prelude is not None:
        ns.update(prelude(tmp_path, monkeypatch))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        exec(compile("\n" * (start - 1) + text, str(doc), "exec"), ns)  # noqa: S102 - the doc's
