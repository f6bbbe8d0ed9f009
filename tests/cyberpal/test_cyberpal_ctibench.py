"""CTIBench CTI-RCM / CTI-MCQ readers (hand-written fixtures in the published TSV layout) and
``eval --split cti-rcm|cti-mcq``."""

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from icml26.core.errors import UserError
from icml26.cyberpal.cli import app
from icml26.cyberpal.ctibench import read_cti_mcq, read_rcm

DATA = Path(__file__).parent / "data"
runner = CliRunner()


def test_read_rcm():
    items = read_rcm(DATA / "cti-rcm.tsv")
    assert [x.gold for x in items] == [79, 89, 416]  # "cwe-89", "CWE-416 " normalised
    assert [x.cve_id for x in items] == ["CVE-2024-0001", "CVE-2024-0002", None]
    assert items[0].prompt.startswith("Analyze the following CVE description")
    assert items[2].description == "A use after free in the parser crashes the service."
    assert [x.line for x in items] == [2, 3, 4]


def test_read_mcq():
    items = read_cti_mcq(DATA / "cti-mcq.tsv")
    assert [it.answer for it in items] == [1, 0, 2]
    assert [it.choices[it.answer] for it in items] == [
        "Credential Access", "Improper Neutralization of Input During Web Page Generation",
        "SQL Injection"]
    assert all(len(it.choices) == 4 and it.task == "cti_mcq" for it in items)


def test_bad_files(tmp_path):
    p = tmp_path / "x.tsv"
    p.write_text("URL,Description,Prompt,GT\nu,d,p,CWE-79\n")  # commas, not tabs
    with pytest.raises(UserError, match="missing column.*tab-separated"):
        read_rcm(p)
    p.write_text("URL\tDescription\tPrompt\tGT\nu\td\tp\tNVD-CWE-Other\n")
    with pytest.raises(UserError, match="x.tsv:2: GT 'NVD-CWE-Other' is not a CWE id"):
        read_rcm(p)
    head = "URL\tQuestion\tOption A\tOption B\tOption C\tOption D\tPrompt\tGT\n"
    p.write_text(head + "u\tq\ta\tb\tc\td\tp\tE\n")
    with pytest.raises(UserError, match="x.tsv:2: GT 'E' is not one of A, B, C, D"):
        read_cti_mcq(p)
    p.write_text(head + "u\tq\ta\t\tc\td\tp\tA\n")
    with pytest.raises(UserError, match="x.tsv:2: empty Question or option"):
        read_cti_mcq(p)
    with pytest.raises(UserError, match="no such CTIBench file"):
        read_rcm(tmp_path / "missing.tsv")


def test_eval_cti_splits(tmp_path):
    import torch

    from icml26.core.lm import tiny_llama
    from icml26.core.mcq import score_mcq
    from icml26.cyberpal.catalog import load_cwe
    from icml26.cyberpal.claim import PLAIN_SYSTEM
    from icml26.cyberpal.evaluate import rank_labels

    m, tok = tiny_llama(hidden=32, layers=1, heads=2, vocab="bytes", seed=0)
    m.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    r = runner.invoke(app, ["eval", "--model", str(tmp_path / "base"), "--split", "cti-mcq",
                            "--data", str(DATA / "cti-mcq.tsv"), "--dtype", "fp32"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output[r.output.index("{"):])
    m = m.to(torch.float32).eval()
    ref = score_mcq(m, tok, read_cti_mcq(DATA / "cti-mcq.tsv"), method="logprob").accuracy
    assert res["n"] == 3 and res["cti/logprob"] == pytest.approx(ref)

    # rank mode: the CLI's accuracy equals an argmax over the file's CWE labels computed here
    r = runner.invoke(app, ["eval", "--model", str(tmp_path / "base"), "--split", "cti-rcm",
                            "--data", str(DATA / "cti-rcm.tsv"), "--dtype", "fp32", "--mode",
                            "rank", "--prompt", "ours"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output[r.output.index("{"):])
    cwe = load_cwe()
    items = read_rcm(DATA / "cti-rcm.tsv")
    labels = sorted({x.gold for x in items})
    from icml26.cyberpal.enrich import cve2cwe_prompt

    lp = rank_labels(m, tok, [[{"role": "system", "content": PLAIN_SYSTEM},
                               {"role": "user", "content": cve2cwe_prompt(x.description)}]
                              for x in items], [f"CWE-{c}: {cwe[c].name}" for c in labels])
    want = np.mean([labels[j] == x.gold for j, x in zip(lp.argmax(1), items, strict=True)])
    assert res["n"] == 3 and res["labels"] == 3 and res["any_gold"] == pytest.approx(want)

    (tmp_path / "base" / "train_ids.json").write_text(json.dumps(["CVE-2024-0002"]))
    r = runner.invoke(app, ["eval", "--model", str(tmp_path / "base"), "--split", "cti-rcm",
                            "--data", str(DATA / "cti-rcm.tsv"), "--dtype", "fp32"])
    assert r.exit_code == 2 and "CVE-2024-0002" in r.output and "--allow-overlap" in r.output
    r = runner.invoke(app, ["eval", "--model", str(tmp_path / "base"), "--split", "cti-rcm"])
    assert r.exit_code == 2 and "needs --data" in r.output
