"""The task x cue x sample grid: generate, extract, gate by sandboxed tests, label, log.

``run_grid(backend, config, log_path)`` walks every ``(task, cue, sample)`` cell not yet in the
log, asks the backend for samples in chunks, and for each reply writes one row: the prompt, the
raw reply, the extracted code, the functional-test outcome (the gate), the family and its AST
evidence, and -- for programs that pass -- the large-input outcome (a family property, kept
apart from the gate). Cells are independent: at scale, shard ``tasks``/``cues`` across jobs.
"""

from __future__ import annotations

import functools
import hashlib
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from icml26.algosteer.backends import Generation
from icml26.algosteer.classify import classify, label_reply
from icml26.algosteer.cues import build_messages, get_cue
from icml26.algosteer.runlog import RunLog
from icml26.algosteer.sandbox import Limits, SandboxPool, calibrate_limits
from icml26.algosteer.tasks import get_task
from icml26.core.claims import Progress
from icml26.core.errors import UserError

__all__ = ["GridConfig", "run_grid", "sample_seed", "cell_key"]


@dataclass(frozen=True)
class GridConfig:
    """What a run log is keyed on. ``samples`` per (task, cue) cell; ``temperature`` >= 0;
    ``max_new_tokens`` per reply; ``seed`` of the whole grid (each sample's seed derives from it,
    the task, the cue and the sample index); ``time_s``/``mem_mb``: the functional-test limits;
    ``large_factor``: large-input limit as a multiple of the fastest reference's time there."""

    tasks: tuple[str, ...]
    cues: tuple[str, ...]
    samples: int = 20
    temperature: float = 0.8
    max_new_tokens: int = 160
    seed: int = 0
    time_s: float = 5.0
    mem_mb: int = 512
    large_factor: float = 20.0
    model: str = ""

    def __post_init__(self) -> None:
        if not self.tasks or not self.cues:
            raise UserError("the grid needs at least one task and one cue")
        for t in self.tasks:
            get_task(t)
        for c in self.cues:
            get_cue(c)
        if self.samples < 1:
            raise UserError(f"samples must be >= 1; got {self.samples}")
        if not self.temperature >= 0:
            raise UserError(f"temperature must be >= 0; got {self.temperature}")
        if self.max_new_tokens < 1:
            raise UserError(f"max_new_tokens must be >= 1; got {self.max_new_tokens}")
        Limits(self.time_s, self.mem_mb)  # validates

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


def sample_seed(seed: int, task: str, cue: str, index: int) -> int:
    """A 63-bit seed for one sample, stable across runs, resumes and batch compositions."""
    digest = hashlib.sha256(f"{seed}|{task}|{cue}|{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def cell_key(task: str, cue: str, index: int) -> str:
    return f"{task}/{cue}/{index}"


def run_grid(
    backend,
    config: GridConfig,
    log_path: str | os.PathLike,
    *,
    force: bool = False,
    workers: int = 2,
    chunk: int = 32,
    progress: Progress | None = None,
    reuse: Sequence[str | os.PathLike] = (),
    budget_s: float | None = None,
) -> list[dict]:
    """Fill the run log at ``log_path`` (resuming it); returns all its rows.

    ``reuse``: other run logs whose *generations* may stand in for new ones. A reply is reused
    only when its row has the same task, cue, sample index, seed, prompt messages, temperature
    and model info, and its log the same ``max_new_tokens`` -- i.e. when the backend would be
    asked exactly the same question. Reused replies are re-extracted, re-tested and re-labelled
    with the current code (so rule fixes apply), and carry ``gen_meta["reused_from"]``. Use it
    to grow a grid (more tasks or samples), to cut one down, or to re-score a finished log.

    ``budget_s``: no new generation chunk starts after this many seconds (reused rows are always
    scored). The grid is then partial; sample-index-major order keeps its cells within one
    sample of each other per task group, and the log resumes later.
    """
    t_start = time.monotonic()
    progress = progress or Progress()
    # sample-index major: a log cut short still holds about equally many samples of every cell
    pending = [(t, c, i) for i in range(config.samples) for t in config.tasks for c in config.cues]
    info = backend.info()
    with RunLog(log_path, config.to_dict(), force=force) as log:
        pending = [p for p in pending if cell_key(*p) not in log.done]
        if not pending:
            return list(log.rows)
        base = Limits(config.time_s, config.mem_mb)
        large = {t: _large_limits(t, base, config.large_factor) for t in config.tasks}
        old = _reusable(reuse, config, info)

        def request(t, c, i):
            return build_messages(get_task(t), get_cue(c)), sample_seed(config.seed, t, c, i)

        def match(p):
            row = old.get(cell_key(*p))
            msgs, seed = request(*p)
            return row if row and row["seed"] == seed and row["prompt"] == msgs else None

        reused = [(p, match(p)) for p in pending]
        fresh = [p for p, row in reused if row is None]
        reused = [(p, row) for p, row in reused if row is not None]
        advance = progress.task("algosteer grid: generate + test", total=len(pending))
        with SandboxPool(workers) as pool:
            for start in range(0, len(reused), chunk):
                part = reused[start : start + chunk]
                keys = [p for p, _ in part]
                reqs = [request(*p) for p in keys]
                gens = [
                    Generation(r["raw"], r["seed"], {**r["gen_meta"], "reused_from": r["_from"]})
                    for _, r in part
                ]
                rows = _score(keys, reqs, gens, pool, base, large, config, info, log.hash, 0.0)
                for row, (_, r) in zip(rows, part, strict=True):
                    row["gen_s"] = r.get("gen_s", 0.0)
                    log.append(row)
                advance(len(part))
            for start in range(0, len(fresh), chunk):
                if budget_s is not None and time.monotonic() - t_start >= budget_s:
                    break
                part = fresh[start : start + chunk]
                reqs = [request(*p) for p in part]
                t0 = time.perf_counter()
                gens = backend.generate(reqs, config.temperature, config.max_new_tokens)
                gen_s = (time.perf_counter() - t0) / max(1, len(part))
                rows = _score(part, reqs, gens, pool, base, large, config, info, log.hash, gen_s)
                for row in rows:
                    log.append(row)
                advance(len(part))
        return list(log.rows)


def _reusable(paths, config: GridConfig, info: dict) -> dict[str, dict]:
    """key -> row of the logs in ``paths`` whose generations match this grid's sampling
    (temperature, max_new_tokens, model info); rows of other settings are ignored."""
    from icml26.algosteer.runlog import read_rows

    out: dict[str, dict] = {}
    for path in paths:
        header, rows = read_rows(path)
        cfg = header.get("config", {})
        if cfg.get("max_new_tokens") != config.max_new_tokens:
            continue
        for r in rows:
            if (
                r.get("temperature") == config.temperature
                and r.get("model") == info
                and r.get("raw") is not None
                and r["key"] not in out
            ):
                out[r["key"]] = {**r, "_from": str(path)}
    return out


@functools.lru_cache(maxsize=64)
def _large_limits(task: str, base: Limits, factor: float) -> Limits:
    """Large-input limits, calibrated once per process and task on this machine."""
    return calibrate_limits(get_task(task), base, factor)


def _score(part, reqs, gens: list[Generation], pool, base, large, config, info, chash, gen_s):
    labelled = []
    for (t, c, i), (msgs, seed), g in zip(part, reqs, gens, strict=True):
        task = get_task(t)
        if g.meta.get("kind") == "solution":  # a program as given (samples.jsonl `solution`)
            code = g.text
            family, evidence = classify(code, task)
        else:
            code, family, evidence = label_reply(g.text, task)
        labelled.append((t, c, i, msgs, seed, g, task, code, family, evidence))
    outcomes = list(
        pool.imap(
            lambda x: pool.run(x[7], x[6], base, "functional") if x[8] != "unparsable" else None,
            labelled,
        )
    )

    def large_run(x):
        (t, _, _, _, _, _, tk, code, _, _), out = x
        if out is not None and out.outcome == "pass" and tk.large:
            return pool.run(code, tk, large[t], "large").to_dict()
        return None

    larges = list(pool.imap(large_run, zip(labelled, outcomes, strict=True)))
    rows = []
    for (t, c, i, msgs, seed, g, _task, code, family, evidence), out, large_out in zip(
        labelled, outcomes, larges, strict=True
    ):
        cue = get_cue(c)
        rows.append(
            {
                "key": cell_key(t, c, i),
                "config_hash": chash,
                "task": t,
                "cue": c,
                "category": cue.category,
                "sample": i,
                "seed": seed,
                "temperature": config.temperature,
                "model": info,
                "prompt": msgs,
                "raw": g.text,
                "gen_meta": g.meta,
                "code": code,
                "family": family,
                "evidence": evidence,
                "outcome": out.outcome if out else "unparsable",
                "test": out.to_dict() if out else None,
                "large": large_out,
                "gen_s": round(gen_s, 3),
            }
        )
    return rows
