"""OOD splits of user records by any column (``--ood-field``), on build and eval."""

import hashlib
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from icml26.core.errors import UserError
from icml26.cyberpal.catalog import load_cwe
from icml26.cyberpal.cli import app
from icml26.cyberpal.pipeline import load_records, record_splits
from icml26.cyberpal.splits import split_records

runner = CliRunner()
VENDORS = {"acme": 8, "globex": 5, "initech": 3, "umbrella": 2, "hooli": 2}
CWES = [79, 89, 787, 22, 352]


def _csv(path, vendors=VENDORS):
    lines, n = ["cve_id,description,cwe,vendor"], 0
    for v, k in vendors.items():
        for _ in range(k):
            n += 1
            lines.append(f"CVE-2021-{1000 + n},{v} product flaw number {n} lets users do "
                         f"things,CWE-{CWES[n % len(CWES)]},{v}")
    path.write_text("\n".join(lines) + "\n")
    return path


def fake_embed(texts, normalize=True):
    """Deterministic unit vectors: identical texts -> cosine 1, others ~0 (no MiniLM)."""
    rows = [np.random.default_rng(int(hashlib.sha256(t.encode()).hexdigest()[:8], 16))
            .standard_normal(64) for t in texts]
    m = np.array(rows, dtype=np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def test_rarest_vendors_are_ood_and_splits_are_disjoint(tmp_path):
    rows = load_records(_csv(tmp_path / "r.csv"), load_cwe(), "vendor")
    sp, info = split_records(rows, "vendor", ood_share=0.2, n_id_test=3)
    # 20 records: 4 needed OOD; rarest first, ties by name: hooli (2), umbrella (2)
    assert info["ood_values"] == ["hooli", "umbrella"]
    group = {r["pair"].cve_id: r["group"] for r in rows}
    assert {group[p.cve_id] for p in sp.ood_test} == {"hooli", "umbrella"}
    assert not {group[p.cve_id] for p in sp.train + sp.id_test} & {"hooli", "umbrella"}
    assert (len(sp.train), len(sp.id_test), len(sp.ood_test)) == (13, 3, 4)
    ids = [p.cve_id for p in sp.train + sp.id_test + sp.ood_test]
    assert len(ids) == len(set(ids)) == 20
    again, _ = split_records(rows, "vendor", ood_share=0.2, n_id_test=3)
    assert again == sp  # deterministic: build and eval agree
    sp2, info2 = split_records(rows, "vendor", ood_values=["acme"], n_id_test=0.25)
    assert info2["ood_values"] == ["acme"] and len(sp2.ood_test) == 8 and len(sp2.id_test) == 3


def test_record_errors(tmp_path):
    cwe = load_cwe()
    rows = load_records(_csv(tmp_path / "r.csv"), cwe, "vendor")
    with pytest.raises(UserError, match="OOD value.*'nope'.*not found in column 'vendor'"):
        split_records(rows, "vendor", ood_values=["nope"])
    with pytest.raises(UserError, match="every value"):
        split_records(rows, "vendor", ood_values=list(VENDORS))
    bad = tmp_path / "b.csv"
    bad.write_text("cve_id,description,cwe\nCVE-2021-1,x,CWE-79\n")
    with pytest.raises(UserError, match="missing column.*vendor"):
        load_records(bad, cwe, "vendor")
    bad.write_text("cve_id,description,cwe,vendor\nCVE-2021-1,x,CWE-79,a\nCVE-2021-1,x,CWE-89,b\n")
    with pytest.raises(UserError, match=r"b.csv:3: CVE-2021-1 has vendor='b' here and 'a'"):
        load_records(bad, cwe, "vendor")
    bad.write_text("cve_id,description,cwe,vendor\nGHSA-1,x,CWE-79,a\n")
    with pytest.raises(UserError, match="b.csv:2: cve_id 'GHSA-1' is not a CVE id"):
        load_records(bad, cwe, "vendor")
    bad.write_text("cve_id,description,cwe,vendor\nCVE-2021-1,x,CWE-79,\n")
    with pytest.raises(UserError, match="b.csv:2: empty 'vendor'"):
        load_records(bad, cwe, "vendor")
    # a CVE on two rows is one record with both CWEs
    bad.write_text("cve_id,description,cwe,vendor\nCVE-2021-1,x,CWE-79,a\nCVE-2021-1,x,CWE-89,a\n")
    (r,) = load_records(bad, cwe, "vendor")
    assert r["pair"].cwes == (79, 89)


def test_build_and_eval_by_vendor(tmp_path, monkeypatch):
    import icml26.core.embed as E

    monkeypatch.setattr(E, "embed", fake_embed)
    recs = _csv(tmp_path / "r.csv")
    out = tmp_path / "d.jsonl"
    r = runner.invoke(app, ["build", "--tasks", "cve2cwe", "--records", str(recs), "--ood-field",
                            "vendor", "--ood-values", "initech,hooli", "--id-test", "4", "-o",
                            str(out)])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["splits"]["ood_values"] == ["hooli", "initech"]
    assert (rep["splits"]["train"], rep["splits"]["id_test"], rep["splits"]["ood_test"]) == \
        (11, 4, 5)
    saved = json.loads((tmp_path / "d.jsonl.work" / "splits.json").read_text())
    trained = {json.loads(x)["meta"]["id"] for x in out.read_text().splitlines()}
    assert trained == set(saved["train"])  # only the train split, never ID test / OOD
    sp, _ = record_splits(recs, "vendor", ood_values=["initech", "hooli"], n_id_test=4)
    assert [p.cve_id for p in sp.ood_test] == saved["ood_test"]

    from icml26.core.lm import tiny_llama

    m, tok = tiny_llama(hidden=32, layers=1, heads=2, vocab="bytes", seed=0)
    m.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    args = ["eval", "--model", str(tmp_path / "base"), "--records", str(recs), "--ood-field",
            "vendor", "--ood-values", "initech,hooli", "--id-test", "4", "--dtype", "fp32",
            "--mode", "rank"]
    r = runner.invoke(app, args + ["--split", "ood"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output[r.output.index("{"):])
    assert res["n"] == 5 and res["ood_values"] == ["hooli", "initech"]
    # the model's training CVEs may not be evaluated
    (tmp_path / "base" / "train_ids.json").write_text(json.dumps(saved["id_test"][:1]))
    r = runner.invoke(app, args + ["--split", "id"])
    assert r.exit_code == 2 and "--allow-overlap" in r.output
    r = runner.invoke(app, ["build", "--tasks", "cve2cwe", "--ood-field", "vendor", "-o",
                            str(tmp_path / "z.jsonl")])
    assert r.exit_code == 2 and "--ood-field needs --records" in r.output
