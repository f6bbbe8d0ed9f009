"""Generations in and out in the formats code-eval users already have.

**samples.jsonl** (EvalPlus's layout): one JSON object per line with ``task_id`` and either
``solution`` (a self-contained program) or ``completion`` (a raw model reply, markdown allowed).
Our task ids are ``algosteer/<task>`` (``fib``, ``tree``, ``dedup``, ...). Optional keys: ``cue``
(a cue id, default ``none``: the prompt the sample answered), ``sample`` (its index in the
``(task, cue)`` cell; default, the order of appearance). Any other key is kept out of the way.
``export_samples`` writes a run log's rows this way (plus ``family``/``outcome``/``raw`` for
reading); ``score_samples`` puts anyone's samples through the same gate (sandboxed functional
tests), AST classifier and large-input check as ``run_grid``, into a run log that ``analyse`` /
``icml26 algosteer stats`` read.

**promptfoo**: ``promptfoo_config`` writes a ``promptfooconfig.yaml`` with one test per
``(task, cue)`` cell (``vars``: ``task_id``, ``cue``, ``messages`` = the chat messages as JSON)
and ``evaluateOptions.repeat`` = samples per cell; ``read_promptfoo`` reads ``promptfoo eval
--output results.json`` back as samples.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from icml26.algosteer.backends import Generation
from icml26.algosteer.cues import build_messages, get_cue
from icml26.algosteer.grid import GridConfig, _large_limits, _score, cell_key, sample_seed
from icml26.algosteer.runlog import RunLog
from icml26.algosteer.sandbox import Limits, SandboxPool
from icml26.algosteer.tasks import get_task
from icml26.core.claims import Progress
from icml26.core.errors import UserError
from icml26.core.io import atomic_open

__all__ = [
    "TASK_PREFIX",
    "export_samples",
    "read_samples",
    "read_promptfoo",
    "score_samples",
    "promptfoo_config",
]

TASK_PREFIX = "algosteer/"


def _task_id(task: str) -> str:
    return TASK_PREFIX + task


def _task_of(task_id: object, where: str) -> str:
    if not isinstance(task_id, str) or not task_id:
        raise UserError(f"{where}: 'task_id' must be a non-empty string; got {task_id!r}")
    name = task_id[len(TASK_PREFIX) :] if task_id.startswith(TASK_PREFIX) else task_id
    try:
        get_task(name)
    except UserError as e:
        raise UserError(f"{where}: task_id {task_id!r}: {e}") from None
    return name


def export_samples(rows: Iterable[dict], path: str | os.PathLike) -> Path:
    """Write run-log rows as EvalPlus-style samples (``solution`` = the extracted program)."""
    path = Path(path)
    with atomic_open(path, "w", encoding="utf-8") as f:
        for r in sorted(rows, key=lambda r: (r["task"], r["cue"], r["sample"])):
            rec = {
                "task_id": _task_id(r["task"]),
                "solution": r.get("code") or "",
                "cue": r["cue"],
                "sample": r["sample"],
                "family": r.get("family"),
                "outcome": r.get("outcome"),
                "raw": r.get("raw"),
            }
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return path


def _normalise(recs: Iterable[tuple[str, object]]) -> list[dict]:
    """``(where, record)`` pairs -> ``{task, cue, sample, text, kind, where}``; indexes filled in
    order of appearance per cell; a repeated ``(task, cue, sample)`` is an error."""
    out: list[dict] = []
    seen: dict[tuple[str, str, int], str] = {}
    next_index: Counter = Counter()
    for where, rec in recs:
        if not isinstance(rec, dict):
            raise UserError(f"{where}: a sample must be a JSON object; got {type(rec).__name__}")
        task = _task_of(rec.get("task_id"), where)
        cue = rec.get("cue", "none")
        if not isinstance(cue, str):
            raise UserError(f"{where}: 'cue' must be a string; got {cue!r}")
        try:
            get_cue(cue)
        except UserError as e:
            raise UserError(f"{where}: {e}") from None
        if "solution" in rec:
            kind = "solution"
        elif "completion" in rec:
            kind = "completion"
        else:
            raise UserError(f"{where}: a sample needs 'solution' or 'completion'; keys: {sorted(rec)}")
        text = rec[kind]
        if not isinstance(text, str):
            raise UserError(f"{where}: {kind!r} must be a string; got {type(text).__name__}")
        index = rec.get("sample")
        if index is None:
            index = next_index[task, cue]
        elif not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise UserError(f"{where}: 'sample' must be an integer >= 0; got {index!r}")
        next_index[task, cue] = max(next_index[task, cue], index + 1)
        key = (task, cue, index)
        if key in seen:
            raise UserError(f"{where}: sample {cell_key(*key)} already given at {seen[key]}")
        seen[key] = where
        out.append({"task": task, "cue": cue, "sample": index, "text": text, "kind": kind,
                    "where": where})
    return out


def read_samples(path: str | os.PathLike) -> list[dict]:
    """Samples of an EvalPlus-style JSONL file; a bad line is an error naming ``file:line``."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such samples file")

    def recs():
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    yield f"{path}:{n}", json.loads(line)
                except json.JSONDecodeError as e:
                    raise UserError(f"{path}:{n}: not JSON ({e.msg})") from None

    return _normalise(recs())


def read_promptfoo(path: str | os.PathLike) -> list[dict]:
    """Samples from ``promptfoo eval --output results.json`` run on ``promptfoo_config``'s file:
    each result's ``vars.task_id``/``vars.cue`` and ``response.output`` (a raw reply); repeats of
    a test become consecutive sample indexes. Results with an error and no output are skipped."""
    path = Path(path)
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no such promptfoo output") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not JSON ({e.msg})") from None
    results = doc.get("results") if isinstance(doc, dict) else None
    if isinstance(results, dict):
        results = results.get("results")
    if not isinstance(results, list):
        raise UserError(f"{path}: no 'results.results' list (is this `promptfoo eval --output` JSON?)")

    def recs():
        for n, r in enumerate(results):
            where = f"{path}: results[{n}]"
            out = ((r or {}).get("response") or {}).get("output")
            if out is None:
                continue  # the provider failed; promptfoo records the error
            v = r.get("vars") or {}
            yield where, {"task_id": v.get("task_id"), "cue": v.get("cue", "none"),
                          "completion": out if isinstance(out, str) else json.dumps(out)}

    return _normalise(recs())


def score_samples(
    samples: Sequence[dict],
    log_path: str | os.PathLike,
    *,
    model: str = "",
    temperature: float = 0.8,
    time_s: float = 5.0,
    mem_mb: int = 512,
    workers: int = 2,
    force: bool = False,
    chunk: int = 32,
    progress: Progress | None = None,
) -> list[dict]:
    """Gate, label and check ``samples`` (from ``read_samples``/``read_promptfoo``) exactly as
    ``run_grid`` does its own generations, into the run log at ``log_path`` (resumed: rows
    already there are kept). ``model`` and ``temperature`` only label the log. A ``solution``
    is scored as given; a ``completion`` goes through the same code extraction as a reply."""
    if not samples:
        raise UserError("no samples to score")
    counts = Counter((s["task"], s["cue"]) for s in samples)
    config = GridConfig(
        tuple(sorted({s["task"] for s in samples})),
        tuple(sorted({s["cue"] for s in samples})),
        samples=max(s["sample"] for s in samples) + 1,
        temperature=temperature,
        seed=0,
        time_s=time_s,
        mem_mb=mem_mb,
        model=model or "samples",
    )
    info = {"source": "samples", "model": model or "samples", "cells": len(counts)}
    progress = progress or Progress()
    with RunLog(log_path, config.to_dict(), force=force) as log:
        todo = [s for s in samples if cell_key(s["task"], s["cue"], s["sample"]) not in log.done]
        base = Limits(config.time_s, config.mem_mb)
        large = {t: _large_limits(t, base, config.large_factor) for t in config.tasks}
        advance = progress.task("algosteer: score samples", total=len(todo))
        with SandboxPool(workers) as pool:
            for start in range(0, len(todo), chunk):
                part = todo[start : start + chunk]
                keys = [(s["task"], s["cue"], s["sample"]) for s in part]
                reqs = [
                    (build_messages(get_task(t), get_cue(c)), sample_seed(config.seed, t, c, i))
                    for t, c, i in keys
                ]
                gens = [
                    Generation(
                        s["text"],
                        seed,
                        {"from": s["where"], "kind": s["kind"]},
                    )
                    for s, (_, seed) in zip(part, reqs, strict=True)
                ]
                for row in _score(keys, reqs, gens, pool, base, large, config, info, log.hash, 0.0):
                    log.append(row)
                advance(len(part))
        return list(log.rows)


def promptfoo_config(
    tasks: Sequence[str],
    cues: Sequence[str],
    samples: int,
    path: str | os.PathLike,
    *,
    providers: Sequence[str] = ("openai:chat:MODEL",),
    temperature: float = 0.8,
    max_tokens: int = 160,
) -> Path:
    """Write a promptfoo config for the ``tasks`` x ``cues`` grid with ``samples`` repeats per
    cell: the prompt is the chat JSON in ``vars.messages`` (the same messages ``run_grid`` sends),
    so ``promptfoo eval -c FILE --output results.json`` then ``read_promptfoo`` (CLI: ``icml26
    algosteer score results.json``) gives the same analysis as a native run."""
    import yaml

    if samples < 1:
        raise UserError(f"samples must be >= 1; got {samples}")
    GridConfig(tuple(tasks), tuple(cues), samples)  # validates names
    tests = []
    for t in tasks:
        for c in cues:
            msgs = build_messages(get_task(t), get_cue(c))
            tests.append(
                {
                    "description": f"{t}/{c}",
                    "vars": {"task_id": _task_id(t), "cue": c, "messages": json.dumps(msgs)},
                }
            )
    doc = {
        "description": "icml26 algosteer: task x cue grid (score with `icml26 algosteer score`)",
        "prompts": [{"id": "algosteer-chat", "raw": "{{ messages }}"}],
        "providers": [
            {"id": p, "config": {"temperature": temperature, "max_tokens": max_tokens}}
            for p in providers
        ],
        "tests": tests,
        "evaluateOptions": {"repeat": samples, "cache": False},
    }
    path = Path(path)
    with atomic_open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(doc, f, sort_keys=False, allow_unicode=True, width=100)
    return path
