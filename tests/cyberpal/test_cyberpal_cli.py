"""The four subcommands end to end on small inputs, and their error messages."""

import json

from typer.testing import CliRunner

from icml26.cyberpal.cli import app

runner = CliRunner()


def test_build_verify_sft_eval(tmp_path):
    out = tmp_path / "d.jsonl"
    r = runner.invoke(app, ["build", "--tasks", "attack_qa", "-o", str(out)])
    assert r.exit_code == 0, r.output
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(recs) > 500 and all(x["messages"][-1]["role"] == "assistant" for x in recs)
    assert runner.invoke(app, ["verify", str(out)]).exit_code == 0
    bad = dict(recs[0])
    bad["messages"] = recs[0]["messages"][:-1] + [
        {"role": "assistant", "content": recs[0]["messages"][-1]["content"].replace(
            "Answer: ", "Answer: x")}]
    (tmp_path / "bad.jsonl").write_text(json.dumps(bad) + "\n")
    r = runner.invoke(app, ["verify", str(tmp_path / "bad.jsonl")])
    assert r.exit_code == 1 and '"answer": 1' in r.output

    from icml26.core.lm import tiny_llama

    m, tok = tiny_llama(hidden=32, layers=1, heads=2, vocab="bytes", seed=0)
    m.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    few = tmp_path / "few.jsonl"
    few.write_text("\n".join(json.dumps(x) for x in recs[:4]) + "\n")
    r = runner.invoke(app, ["sft", "--data", str(few), "-o", str(tmp_path / "ft"), "--model",
                            str(tmp_path / "base"), "--epochs", "1", "--batch-size", "2",
                            "--max-len", "1024", "--no-autocast"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "ft" / "train_ids.json").is_file()
    r = runner.invoke(app, ["eval", "--model", str(tmp_path / "ft"), "--split", "ood",
                            "--n-cwes", "10", "--dtype", "fp32", "--limit", "2"])
    assert r.exit_code == 0 and json.loads(r.output[r.output.rindex("{\n"):])["n"] == 2, r.output
    from icml26.cyberpal.pipeline import catalogue_splits
    from icml26.cyberpal.splits import SplitConfig

    first = catalogue_splits(SplitConfig(n_cwes=10)).ood_test[0].cve_id
    (tmp_path / "ft" / "train_ids.json").write_text(json.dumps([first]))  # plant an overlap
    r = runner.invoke(app, ["eval", "--model", str(tmp_path / "ft"), "--split", "ood",
                            "--n-cwes", "10", "--dtype", "fp32", "--limit", "2"])
    assert r.exit_code == 2 and "--allow-overlap" in r.output, r.output


def test_errors_are_one_line(tmp_path):
    r = runner.invoke(app, ["build", "--tasks", "poems", "-o", str(tmp_path / "x.jsonl")])
    assert r.exit_code == 2 and "unknown task(s) ['poems']" in r.output
    (tmp_path / "x.jsonl").write_text("{bad\n")
    r = runner.invoke(app, ["verify", str(tmp_path / "x.jsonl")])
    assert r.exit_code == 2 and "x.jsonl: row 1: not JSON" in r.output
    csv = tmp_path / "r.csv"
    csv.write_text("cve_id,description\nCVE-2020-1,x\n")
    r = runner.invoke(app, ["build", "--tasks", "cve2cwe", "--records", str(csv), "-o",
                            str(tmp_path / "y.jsonl")])
    assert r.exit_code == 2 and "missing column(s) cwe" in r.output
    csv.write_text("cve_id,description,cwe\nCVE-2020-1,x,CWE-99999\nCVE-2020-2,y,CWE-79\n")
    r = runner.invoke(app, ["build", "--tasks", "cve2cwe", "--records", str(csv), "-o",
                            str(tmp_path / "y.jsonl")])
    assert r.exit_code == 2 and "unknown CWE id(s)" in r.output and "line 2" in r.output
