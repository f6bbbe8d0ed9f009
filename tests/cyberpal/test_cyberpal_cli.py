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


def test_export_hf_and_lm_eval_task_commands(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    data = tmp_path / "d.jsonl"
    r = runner.invoke(app, ["build", "--tasks", "attack_qa", "-o", str(data)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["export-hf", str(data), "-o", str(tmp_path / "ds")])
    assert r.exit_code == 0, r.output
    ds = datasets.load_dataset(str(tmp_path / "ds"), split="train")
    assert len(ds) == len(data.read_text().splitlines())
    assert "Build report" in (tmp_path / "ds" / "README.md").read_text()  # from d.jsonl.work
    r = runner.invoke(app, ["lm-eval-task", "-o", str(tmp_path / "t"), "--split", "id"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "t" / "icml26_cve2cwe_rank.yaml").is_file()
    assert (tmp_path / "t" / "cve2cwe_id_test.jsonl").read_text().count("\n") > 10
    r = runner.invoke(app, ["lm-eval-task", "-o", str(tmp_path / "t"), "--split", "test"])
    assert r.exit_code != 0 and "--split must be id or ood; got 'test'" in r.output
    (tmp_path / "e.jsonl").write_text('{"messages": [{"role": "user", "content": "x"}]}\n')
    r = runner.invoke(app, ["export-hf", str(tmp_path / "e.jsonl"), "-o", str(tmp_path / "x")])
    assert r.exit_code != 0 and "e.jsonl:1: not a chat record" in r.output
