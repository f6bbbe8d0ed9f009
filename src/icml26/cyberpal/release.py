"""The generated data in the formats its users load: a Hugging Face dataset folder (data files, a
dataset card with a ``datasets.Features`` schema) and an lm-eval task for CVE -> CWE.

**Dataset folder** (``export_dataset``)::

    OUT/README.md            dataset card: YAML header (license, task categories, configs,
                             dataset_info.features = ``features()``), then what the data is
    OUT/data/train.jsonl     one row per chat record, the columns of ``features()``

A row is ``{"messages": [{role, content}...], "task", "id", "gold": [str], "format", "writer",
"facts"}``: ``gold`` as strings ("CWE-79", or ATT&CK tactic names), ``facts`` the grounding
facts as a JSON string (their shape differs by task, which one Arrow schema cannot hold).
``datasets.load_dataset(OUT)`` reads it with that schema; ``from_rows`` turns rows back into the
chat records ``icml26 cyberpal sft`` trains on.

**lm-eval task** (``lm_eval_task``): ``OUT/cve2cwe_<split>.jsonl`` (``id``, ``prompt``,
``choices`` = the candidate labels "CWE-<id>: <name>", ``gold`` = the indexes of the CVE's CWEs,
``target`` = the first gold label) and two task YAMLs for ``lm_eval --include_path OUT``:
``icml26_cve2cwe_rank`` (``multiple_choice``: log-likelihood ranking of every candidate, the
claim's rank mode; ``acc`` counts any gold CWE) and ``icml26_cve2cwe_gen`` (``generate_until``,
the first ``CWE-<n>`` of the reply against the gold ids). The system prompt is the task's
``description``: run with ``--apply_chat_template`` to get the claim's chats.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from icml26.core.errors import UserError
from icml26.core.io import atomic_open, atomic_write_text
from icml26.cyberpal.catalog import CweCatalog, Pair
from icml26.cyberpal.enrich import cve2cwe_prompt

__all__ = [
    "PLAIN_SYSTEM",
    "features",
    "to_row",
    "from_rows",
    "export_dataset",
    "eval_rows",
    "lm_eval_task",
]

#: the terse-answer system prompt of the claim's arm A and of its rank mode
PLAIN_SYSTEM = (
    "You are a cybersecurity analyst. Map the vulnerability to its CWE weakness. "
    "Answer with the CWE id and name."
)
_TERMS = (
    "CWE content: MITRE CWE Terms of Use (https://cwe.mitre.org/about/termsofuse.html); "
    "ATT&CK content: MITRE ATT&CK Terms of Use "
    "(https://attack.mitre.org/resources/legal-and-branding/terms-of-use/)"
)


def features():
    """The ``datasets.Features`` of a row of the released training data."""
    import datasets

    s = datasets.Value("string")
    return datasets.Features(
        {
            "messages": datasets.List({"role": s, "content": s}),
            "task": s,
            "id": s,
            "gold": datasets.List(s),
            "format": s,
            "writer": s,
            "facts": s,
        }
    )


def _gold_str(task: str, g) -> str:
    return str(g) if task == "attack_qa" else f"CWE-{int(g)}"


def to_row(record: dict, where: str = "record") -> dict:
    """One chat record (``{"messages", "meta"}``) as a row of ``features()``."""
    meta = record.get("meta") or {}
    for key in ("task", "id"):
        if not isinstance(meta.get(key), str):
            raise UserError(f"{where}: meta.{key} must be a string; got {meta.get(key)!r}")
    task = meta["task"]
    return {
        "messages": [{"role": m["role"], "content": m["content"]} for m in record["messages"]],
        "task": task,
        "id": meta["id"],
        "gold": [_gold_str(task, g) for g in meta.get("gold", [])],
        "format": str(meta.get("format", "")),
        "writer": str(meta.get("writer", "")),
        "facts": json.dumps(meta.get("facts", {}), ensure_ascii=False, sort_keys=True),
    }


def from_rows(rows: Iterable[dict]) -> list[dict]:
    """Rows of the released data back to chat records (``meta.gold`` as the ids/tactics)."""
    out = []
    for r in rows:
        task = r["task"]
        gold = [g if task == "attack_qa" else int(g.removeprefix("CWE-")) for g in r["gold"]]
        meta = {"task": task, "id": r["id"], "gold": gold, "format": r["format"],
                "writer": r["writer"], "facts": json.loads(r["facts"])}
        out.append({"messages": [dict(m) for m in r["messages"]], "meta": meta})
    return out


def _card(rows: list[dict], name: str, report: dict | None) -> str:
    import yaml

    tasks = Counter(r["task"] for r in rows)
    formats = Counter(r["format"] for r in rows)
    header = {
        "pretty_name": name,
        "license": "other",
        "license_name": "mitre-terms-of-use",
        "license_link": "https://cwe.mitre.org/about/termsofuse.html",
        "language": ["en"],
        "task_categories": ["text-generation", "text-classification"],
        "tags": ["cybersecurity", "cwe", "cve", "mitre-attack", "synthetic", "icml26"],
        "size_categories": ["n<1K" if len(rows) < 1000 else "1K<n<10K" if len(rows) < 10_000
                            else "10K<n<100K"],
        "configs": [{"config_name": "default",
                     "data_files": [{"split": "train", "path": "data/train.jsonl"}]}],
        "dataset_info": {"features": features()._to_yaml_list(),
                         "splits": [{"name": "train", "num_examples": len(rows)}]},
    }
    lines = [
        "---",
        yaml.safe_dump(header, sort_keys=False, allow_unicode=True, width=100).rstrip(),
        "---",
        f"# {name}",
        "",
        "Chat records for supervised fine-tuning on security knowledge, built by `icml26 "
        "cyberpal build` (the CyberPal 2.0 pipeline in miniature: tasks from the MITRE CWE and "
        "ATT&CK catalogues, grounding facts, a writer that fills an expert reasoning format, a "
        "verifier that checks every slot against the catalogues, de-duplication and "
        "decontamination against the CVE -> CWE evaluation sets).",
        "",
        "| task | rows |",
        "| --- | --- |",
        *[f"| {t} | {n} |" for t, n in sorted(tasks.items())],
        "",
        "Formats: " + ", ".join(f"{f} ({n})" for f, n in sorted(formats.items())) + ".",
        "",
        "Columns: `messages` (system, user, assistant), `task` (cve2cwe | cwe_qa | attack_qa), "
        "`id` (CVE / CWE / ATT&CK id), `gold` (`CWE-<n>` labels or ATT&CK tactics), `format`, "
        "`writer` (template | lm), `facts` (the grounding facts, a JSON string).",
        "",
        "```python",
        "import datasets",
        "ds = datasets.load_dataset('PATH/TO/THIS/FOLDER', split='train')",
        "```",
        "",
        f"Licence: {_TERMS}. Generated text is derived from those catalogues.",
    ]
    if report:
        lines += ["", "Build report:", "", "```json", json.dumps(report, indent=1), "```"]
    return "\n".join(lines) + "\n"


def export_dataset(records: Sequence[dict], out: str | os.PathLike, *,
                   name: str = "icml26 CyberPal SFT data", report: dict | None = None) -> Path:
    """Write ``records`` (chat JSONL records) as a Hugging Face dataset folder at ``out``."""
    if not records:
        raise UserError("no records to export")
    out = Path(out)
    rows = [to_row(r, f"record {i + 1}") for i, r in enumerate(records)]
    (out / "data").mkdir(parents=True, exist_ok=True)
    with atomic_open(out / "data" / "train.jsonl", "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    atomic_write_text(out / "README.md", _card(rows, name, report))
    return out


def eval_rows(pairs: Sequence[Pair], labels: Sequence[int], cwe: CweCatalog) -> list[dict]:
    """CVE -> CWE items over the candidate ``labels``: a CVE none of whose CWEs is a candidate is
    left out (as in the claim)."""
    labels = [int(c) for c in labels]
    if not labels:
        raise UserError("no candidate CWE labels")
    index = {c: j for j, c in enumerate(labels)}
    choices = [f"CWE-{c}: {cwe[c].name}" for c in labels]
    out = []
    for p in pairs:
        gold = [index[c] for c in p.cwes if c in index]
        if gold:
            out.append({"id": p.cve_id, "prompt": cve2cwe_prompt(p.description),
                        "choices": choices, "gold": gold, "target": choices[gold[0]]})
    return out


def lm_eval_task(rows: Sequence[dict], out: str | os.PathLike, *, split: str = "ood_test",
                 system: str = PLAIN_SYSTEM) -> list[Path]:
    """Write the items (``eval_rows``) and the rank- and generation-mode task YAMLs to ``out``
    (use as ``lm_eval --include_path OUT --tasks icml26_cve2cwe_rank``)."""
    import yaml

    if not rows:
        raise UserError("no evaluation items to write")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    data = out / f"cve2cwe_{split}.jsonl"
    with atomic_open(data, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    common = {
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data.resolve())}},
        "test_split": "test",
        "description": system + "\n\n",
        "doc_to_text": "prompt",
        "metadata": {"version": 1.0, "source": "icml26 cyberpal lm-eval-task", "split": split},
    }
    rank = {
        "task": "icml26_cve2cwe_rank",
        **common,
        "output_type": "multiple_choice",
        "doc_to_choice": "choices",
        "doc_to_target": "gold",
        "target_delimiter": "\n",
        "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
    }
    gen = {
        "task": "icml26_cve2cwe_gen",
        **common,
        "output_type": "generate_until",
        "doc_to_target": "target",
        "target_delimiter": "\n",
        "generation_kwargs": {"until": ["\n\n"], "max_gen_toks": 64, "do_sample": False},
        "filter_list": [{"name": "cwe-id", "filter": [
            {"function": "regex", "regex_pattern": r"(CWE-\d+)"},
            {"function": "take_first"},
        ]}],
        "metric_list": [{"metric": "exact_match", "aggregation": "mean",
                         "higher_is_better": True, "regexes_to_ignore": [r":.*$"]}],
    }
    paths = []
    for doc in (rank, gen):
        p = out / f"{doc['task']}.yaml"
        atomic_write_text(p, yaml.safe_dump(doc, sort_keys=False, width=100))
        paths.append(p)
    return [data, *paths]
