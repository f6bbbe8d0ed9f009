"""Database file, checkpoints, the fold builder and Top-K evaluation."""

import sqlite3

import pytest
from rdkit import Chem

from icml26.chemcensor import ChemCensor, ReactionDB, build_dataset, evaluate_topk
from icml26.chemcensor.evaluate import auroc
from icml26.chemcensor.templates import apply_template, template_by_name
from icml26.core.errors import UserError


def _amides():
    acids = ["CC(=O)O", "OC(=O)c1ccccc1", "CCC(=O)O", "OC(=O)C1CCCCC1", "OC(=O)c1ccc(Cl)cc1"]
    amines = ["NCc1ccccc1", "C1COCCN1", "C1CCNCC1", "CC(C)N"]
    t = template_by_name("amide_from_acid")
    return [
        apply_template(t, [Chem.MolFromSmiles(a), Chem.MolFromSmiles(b)])[0]
        for a in acids
        for b in amines
    ]


RXNS = _amides()


def test_save_open_roundtrip(tmp_path):
    db = ReactionDB.build(RXNS, tmp_path / "db.sqlite")
    back = ReactionDB.open(tmp_path / "db.sqlite")
    assert back.exact == db.exact and back.centres == db.centres and back.max_level == 4
    assert [x.value for x in ChemCensor(back, mapper="given").score_many(RXNS)] == [5] * len(RXNS)
    assert not list(tmp_path.glob("*.tmp"))  # atomic write leaves no temp file


def test_open_refuses_bad_files(tmp_path):
    with pytest.raises(UserError, match="no such database"):
        ReactionDB.open(tmp_path / "missing.sqlite")
    ReactionDB.build(RXNS, tmp_path / "db.sqlite")
    con = sqlite3.connect(tmp_path / "db.sqlite")
    with con:
        con.execute("UPDATE meta SET value='deadbeef' WHERE key='fg_hash'")
    con.close()
    with pytest.raises(UserError, match="FG library"):
        ReactionDB.open(tmp_path / "db.sqlite")
    (tmp_path / "junk.sqlite").write_text("not sqlite")
    with pytest.raises(UserError, match="not a ChemCensor database"):
        ReactionDB.open(tmp_path / "junk.sqlite")
    ReactionDB().save(tmp_path / "empty.sqlite")
    with pytest.raises(UserError, match="empty"):
        ReactionDB.open(tmp_path / "empty.sqlite")
    with pytest.raises(UserError, match="no reaction"):
        ReactionDB.build(["garbage"])


def test_checkpoint_resumes_and_rejects_other_input(tmp_path):
    cc = ChemCensor(ReactionDB.build(RXNS[:10]), mapper="given")
    ck = tmp_path / "ck.jsonl"
    first = cc.score_many(RXNS, checkpoint=ck, chunk=4)
    lines = ck.read_text().splitlines()
    assert len(lines) == 1 + len(RXNS)
    ck.write_text("\n".join(lines[:6]) + "\n")  # interrupted after 5 results
    again = cc.score_many(RXNS, checkpoint=ck, chunk=4)
    assert again == first
    with pytest.raises(UserError, match="another input"):
        cc.score_many(RXNS[:3], checkpoint=ck)


def test_parallel_equals_serial():
    cc = ChemCensor(ReactionDB.build(RXNS[::2]), mapper="given")
    assert cc.score_many(RXNS, n_jobs=2) == cc.score_many(RXNS, n_jobs=1)


def test_no_record_scores_5_against_its_fold():
    out = build_dataset(RXNS, min_level=-1, folds=3)
    assert len(out) == len(RXNS)
    assert all(r["level"] < 5 for r in out)
    assert {r["split"] for r in out} <= {"test", "valid", "train"}
    kept = build_dataset(RXNS, min_level=1, folds=3)
    assert all(r["level"] >= 1 for r in kept)
    with pytest.raises(ValueError, match="folds"):
        build_dataset(RXNS, folds=1)


def test_evaluate_topk_counts():
    preds = {"T1": ["CO", "OCC.N", "CC"], "T2": ["CS", "CCl", "c1ccccc1.O"]}
    gold = {"T1": "N.CCO", "T2": "O.c1ccccc1"}  # same sets, other order
    levels = {"T1": [0, 5, -1], "T2": [2, -1, 5]}
    out = evaluate_topk(preds, gold, ks=(1, 2, 3), levels=levels)
    assert out["exact@1"] == 0.0 and out["exact@2"] == 0.5 and out["exact@3"] == 1.0
    assert out["plausibility@1"] == 0.5 and out["plausibility@2"] == 1.0


def test_auroc_matches_brute_force():
    import itertools
    import random

    rng = random.Random(0)
    for _ in range(20):
        p = [rng.randint(-1, 5) for _ in range(rng.randint(1, 8))]
        n = [rng.randint(-1, 5) for _ in range(rng.randint(1, 8))]
        brute = sum(
            1.0 if a > b else 0.5 if a == b else 0.0 for a, b in itertools.product(p, n)
        ) / (len(p) * len(n))
        assert auroc(p, n) == pytest.approx(brute)


def test_saved_database_follows_the_umask(tmp_path):
    """The database file gets the usual permissions (mkstemp's 0600 made it private; issue 40)."""
    import os

    old = os.umask(0o022)
    try:
        path = ReactionDB().save(tmp_path / "db.sqlite")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


def test_rxnmapper_worker_says_it_is_starting(tmp_path, capfd):
    """Start-up (loading RXNMapper's model) prints a status line first (issue 40)."""
    from icml26.chemcensor.mapper import RXNMapperWorker

    (tmp_path / "rxnmapper").mkdir()
    (tmp_path / "rxnmapper" / "__init__.py").write_text("class RXNMapper:\n    pass\n")
    with RXNMapperWorker(site=tmp_path):
        pass
    assert "starting the RXNMapper worker" in capfd.readouterr().err
