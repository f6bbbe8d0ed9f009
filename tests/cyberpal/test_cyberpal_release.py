"""Released data formats: the Hugging Face dataset folder loads with its declared schema and round
trips to the same chat records; the lm-eval task renders the claim's items (real lm-eval when
installed: prompts, choices, gold indexes; the filter and metric of the generation task)."""

import json

import pytest
import yaml

from icml26.core.errors import UserError
from icml26.cyberpal import enrich
from icml26.cyberpal.catalog import load_attack, load_cwe
from icml26.cyberpal.formats import default_formats
from icml26.cyberpal.pipeline import catalogue_splits
from icml26.cyberpal.release import (
    PLAIN_SYSTEM,
    eval_rows,
    export_dataset,
    features,
    from_rows,
    lm_eval_task,
    to_row,
)

CWE = load_cwe()


@pytest.fixture(scope="module")
def records():
    attack = load_attack()
    splits = catalogue_splits()
    tasks = enrich.cve2cwe_tasks(splits.train[:6], splits.labels)
    tasks += enrich.cwe_qa_tasks(CWE, sorted({c for p in splits.train[:6] for c in p.cwes}))[:3]
    tasks += enrich.attack_qa_tasks(attack)[:3]
    g = enrich.ground([{**t} for t in tasks], CWE, attack, None)
    recs = enrich.write_template(g, default_formats())
    recs = [r for r in recs if r["messages"][-1]["content"]]
    assert {r["meta"]["task"] for r in recs} == {"cve2cwe", "cwe_qa", "attack_qa"}
    return recs


def _norm(r):
    return json.loads(json.dumps(r))  # tuples -> lists, as JSON stores them


def test_dataset_folder_loads_with_its_schema_and_round_trips(records, tmp_path, monkeypatch):
    import datasets

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    out = export_dataset(records, tmp_path / "ds", report={"final": len(records)})
    card = (out / "README.md").read_text()
    header = yaml.safe_load(card.split("---\n")[1])
    assert datasets.Features._from_yaml_list(header["dataset_info"]["features"]) == features()
    assert header["configs"][0]["data_files"][0]["path"] == "data/train.jsonl"
    assert header["dataset_info"]["splits"][0]["num_examples"] == len(records)
    ds = datasets.load_dataset(str(out), split="train")
    assert ds.features == features() and len(ds) == len(records)
    back = from_rows(ds)
    strip = [{"messages": r["messages"], "meta": {k: r["meta"][k] for k in
              ("task", "id", "gold", "format", "writer", "facts")}} for r in records]
    assert back == _norm(strip)
    gold = {r["task"]: r["gold"] for r in ds}
    assert gold["cve2cwe"][0].startswith("CWE-") and not gold["attack_qa"][0].startswith("CWE-")


def test_bad_records_are_named(records):
    bad = {"messages": records[0]["messages"], "meta": {"task": "cve2cwe", "id": 7}}
    with pytest.raises(UserError, match="record 2: meta.id must be a string"):
        export_dataset([records[0], bad], "/nonexistent/never")
    with pytest.raises(UserError, match="no records"):
        export_dataset([], "/nonexistent/never")
    assert to_row(records[0])["facts"].startswith("{")


def test_eval_rows_keep_every_gold_candidate():
    splits = catalogue_splits()
    rows = eval_rows(splits.ood_test, splits.labels, CWE)
    assert rows and len(rows) <= len(splits.ood_test)
    for r, p in zip(rows, [p for p in splits.ood_test if set(p.cwes) & set(splits.labels)]):
        assert r["id"] == p.cve_id
        assert [int(r["choices"][j].split(":")[0][4:]) for j in r["gold"]] == [
            c for c in p.cwes if c in splits.labels
        ]
        assert r["target"] == r["choices"][r["gold"][0]]
        assert "CWE-" not in r["prompt"].split("\n")[0].replace("[CWE]", "")  # ids masked
    with pytest.raises(UserError, match="no candidate"):
        eval_rows(splits.ood_test, [], CWE)


def test_lm_eval_task_files(tmp_path):
    splits = catalogue_splits()
    rows = eval_rows(splits.ood_test[:20], splits.labels, CWE)
    data, rank, gen = lm_eval_task(rows, tmp_path / "t")
    doc = yaml.safe_load(rank.read_text())
    assert doc["output_type"] == "multiple_choice" and doc["doc_to_choice"] == "choices"
    assert doc["dataset_kwargs"]["data_files"]["test"] == str(data.resolve())
    assert doc["description"].startswith(PLAIN_SYSTEM)
    assert [json.loads(x) for x in data.read_text().splitlines()] == rows
    assert yaml.safe_load(gen.read_text())["output_type"] == "generate_until"
    with pytest.raises(UserError, match="no evaluation items"):
        lm_eval_task([], tmp_path / "u")


def test_lm_eval_reads_the_tasks(tmp_path, monkeypatch):
    """lm-eval itself loads both tasks from --include_path and renders the claim's items."""
    pytest.importorskip("lm_eval")
    from lm_eval.tasks import TaskManager

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    splits = catalogue_splits()
    rows = eval_rows(splits.ood_test[:12], splits.labels, CWE)
    lm_eval_task(rows, tmp_path / "t")
    tm = TaskManager(include_path=str(tmp_path / "t"), include_defaults=False)
    tasks = tm.load(["icml26_cve2cwe_rank", "icml26_cve2cwe_gen"])["tasks"]
    rank, gen = tasks["icml26_cve2cwe_rank"], tasks["icml26_cve2cwe_gen"]
    docs = list(rank.test_docs())
    assert len(docs) == len(rows)
    for d, r in zip(docs, rows):
        assert rank.doc_to_text(d) == r["prompt"]
        assert rank.doc_to_choice(d) == r["choices"]
        assert rank.doc_to_target(d) == r["gold"]
        assert gen.doc_to_target(d) == r["target"]
    # rank mode: any gold index counts (lm-eval's multiple-target accuracy)
    d, r = docs[0], rows[0]
    lls = [(-5.0, False)] * len(r["choices"])
    lls[r["gold"][-1]] = (-1.0, False)
    assert rank.process_results(d, lls)["acc"] == 1.0
    lls = [(-5.0, False)] * len(r["choices"])
    lls[(r["gold"][0] + 1) % len(lls) if len(r["gold"]) == 1 else 0] = (-1.0, False)
    if len(r["gold"]) == 1:
        assert rank.process_results(d, lls)["acc"] == 0.0
    # the context lm-eval builds: the system prompt (description), then the CVE prompt
    ctx = rank.fewshot_context(d, num_fewshot=0)
    assert ctx.startswith(PLAIN_SYSTEM) and ctx.endswith(r["prompt"])
