"""The four CLI commands on small CSV files (mapper=given, no RXNMapper needed)."""

import csv
import json

from rdkit import Chem
from typer.testing import CliRunner

from icml26.chemcensor.cli import app
from icml26.chemcensor.templates import apply_template, template_by_name

ACIDS = ["CC(=O)O", "OC(=O)c1ccccc1", "CCC(=O)O", "OC(=O)C1CCCCC1"]
AMINES = ["NCc1ccccc1", "C1COCCN1", "C1CCNCC1"]
T = template_by_name("amide_from_acid")
RXNS = [
    apply_template(T, [Chem.MolFromSmiles(a), Chem.MolFromSmiles(b)])[0]
    for a in ACIDS
    for b in AMINES
]


def _csv(path, header, rows):
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_build_score_dataset_eval(tmp_path):
    run = CliRunner().invoke
    rx = _csv(tmp_path / "rxns.csv", ["rxn_smiles"], [[r] for r in RXNS])
    res = run(app, ["build-db", str(rx), "-o", str(tmp_path / "db.sqlite"), "--mapper", "given"])
    assert res.exit_code == 0, res.output
    preds = _csv(tmp_path / "preds.csv", ["rxn_smiles"], [[RXNS[0]], ["CC(>>C"], ["no arrow"]])
    res = run(
        app,
        [
            "score",
            str(preds),
            "--db",
            str(tmp_path / "db.sqlite"),
            "-o",
            str(tmp_path / "o.csv"),
            "--mapper",
            "given",
        ],
    )
    assert res.exit_code == 0, res.output
    with (tmp_path / "o.csv").open() as fh:
        out = list(csv.DictReader(fh))
    assert [r["level"] for r in out] == ["5", "-1", "-1"]
    assert out[1]["stage"] == "validator"
    assert not (tmp_path / "o.csv.ckpt.jsonl").exists()
    res = run(
        app,
        [
            "dataset",
            str(rx),
            "-o",
            str(tmp_path / "c.jsonl"),
            "--min-level",
            "-1",
            "--folds",
            "2",
            "--mapper",
            "given",
        ],
    )
    assert res.exit_code == 0, res.output
    recs = [json.loads(x) for x in (tmp_path / "c.jsonl").read_text().splitlines()]
    assert all(r["level"] < 5 for r in recs)
    p2 = _csv(
        tmp_path / "p2.csv",
        ["target", "reactants", "rank", "level"],
        [["T", "CCO", 1, 0], ["T", "CC.O", 2, 3]],
    )
    gold = _csv(tmp_path / "g.csv", ["target", "reactants"], [["T", "O.CC"]])
    res = run(app, ["eval", str(p2), "--gold", str(gold), "--ks", "1,2"])
    assert res.exit_code == 0, res.output
    assert "K=1: exact@K 0.000  plausibility@K 0.000" in res.output
    assert "K=2: exact@K 1.000  plausibility@K 1.000" in res.output


def test_missing_column_is_named(tmp_path):
    bad = _csv(tmp_path / "bad.csv", ["smiles"], [["CCO"]])
    res = CliRunner().invoke(app, ["build-db", str(bad), "-o", str(tmp_path / "db.sqlite")])
    assert res.exit_code != 0
    assert "columns seen: ['smiles']" in str(res.exception)
