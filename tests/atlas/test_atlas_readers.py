"""lm-eval --log_samples files -> response matrix, and the long-table writer."""

import json

import numpy as np
import pytest

from icml26.atlas.data import load_responses
from icml26.atlas.readers import read_lm_eval_samples, task_of, write_long
from icml26.core.errors import UserError

STAMP = "2024-05-13T14-26-39.123456"


def write_samples(folder, task, rows):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"samples_{task}_{STAMP}.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_task_names_from_file_names():
    assert task_of(f"samples_arc_easy_{STAMP}.jsonl") == "arc_easy"
    assert task_of("samples_mmlu_high_school_physics_2025-01-02T03-04-05.000001.jsonl") == (
        "mmlu_high_school_physics"
    )
    assert task_of("samples_hellaswag.jsonl") == "hellaswag"
    with pytest.raises(UserError, match="not an lm-eval samples file"):
        task_of("results.json")


def test_two_models_two_tasks_matrix_and_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    truth = {}
    for m in ("org__a", "org__b"):
        for task, n in (("arc_easy", 5), ("piqa", 3)):
            vals = rng.integers(0, 2, n)
            rows = [
                {
                    "doc_id": k,
                    "doc": {"q": "…"},
                    "filter": "none",
                    "metrics": ["acc", "acc_norm"],
                    "acc": float(v),
                    "acc_norm": 1.0 - float(v),
                }
                for k, v in enumerate(vals)
            ]
            write_samples(tmp_path / m, task, rows)
            truth.update({(m, f"{task}:{k}"): float(v) for k, v in enumerate(vals)})
    R = read_lm_eval_samples(tmp_path)
    assert sorted(R.models) == ["org__a", "org__b"] and len(R.items) == 8
    for (m, it), v in truth.items():
        assert R.matrix[R.models.index(m), R.items.index(it)] == v
    norm = read_lm_eval_samples(tmp_path, "acc_norm")
    np.testing.assert_array_equal(norm.matrix, 1.0 - R.matrix)
    for suffix in (".csv", ".parquet"):
        back = load_responses(write_long(tmp_path / f"long{suffix}", R))
        assert back.models == R.models and back.items == R.items
        np.testing.assert_array_equal(back.matrix, R.matrix)


def test_missing_documents_stay_missing_and_model_override(tmp_path):
    write_samples(tmp_path / "x", "piqa", [{"doc_id": 0, "acc": 1}, {"doc_id": 2, "acc": 0}])
    write_samples(tmp_path / "y", "piqa", [{"doc_id": 1, "acc": True}])
    R = read_lm_eval_samples([tmp_path / "x", tmp_path / "y"])
    assert R.items == ["piqa:0", "piqa:2", "piqa:1"]
    assert np.isnan(R.matrix[0, 2]) and np.isnan(R.matrix[1, 0]) and R.matrix[1, 2] == 1.0
    one = read_lm_eval_samples(tmp_path / "x", model="mine")
    assert one.models == ["mine"]


def test_filters_must_be_chosen_when_several(tmp_path):
    rows = [
        {"doc_id": 0, "filter": "strict-match", "exact_match": 0.0},
        {"doc_id": 0, "filter": "flexible-extract", "exact_match": 1.0},
    ]
    p = write_samples(tmp_path / "m", "gsm8k", rows)
    with pytest.raises(UserError, match="several filters.*flexible-extract, strict-match"):
        read_lm_eval_samples(p, "exact_match")
    R = read_lm_eval_samples(p, "exact_match", filter="flexible-extract")
    assert R.matrix.tolist() == [[1.0]]
    with pytest.raises(UserError, match="no samples with filter 'none'"):
        read_lm_eval_samples(p, "exact_match", filter="none")


@pytest.mark.parametrize(
    "rows, match",
    [
        ([{"acc": 1.0}], r"line 1: no `doc_id` field"),
        (
            [{"doc_id": 0, "acc_norm": 1.0, "metrics": ["acc_norm"]}],
            r"line 1: no `acc` field; this file's metrics: acc_norm",
        ),
        ([{"doc_id": 0, "acc": 0.5}], r"line 1: `acc` = 0.5 is not 0 or 1"),
        ([{"doc_id": "3", "acc": 1}], r"`doc_id` = '3' is not a non-negative integer"),
        ([{"doc_id": 0, "acc": 1}, {"doc_id": 0, "acc": 0}], r"conflicting `acc`.*line 1.*line 2"),
    ],
)
def test_bad_samples_name_file_line_and_field(tmp_path, rows, match):
    p = write_samples(tmp_path / "m", "arc_easy", rows)
    with pytest.raises(UserError, match=match) as e:
        read_lm_eval_samples(p)
    assert str(p) in str(e.value)


def test_no_samples_files_in_folder(tmp_path):
    with pytest.raises(UserError, match="no samples_\\*.jsonl"):
        read_lm_eval_samples(tmp_path)
    (tmp_path / "samples_arc_easy.jsonl").write_text("{not json\n")
    with pytest.raises(UserError, match="line 1: not valid JSON"):
        read_lm_eval_samples(tmp_path)
