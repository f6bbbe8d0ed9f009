import csv

import numpy as np
from typer.testing import CliRunner

from icml26.cclrec.cli import app


def _files(tmp_path):
    rng = np.random.default_rng(0)
    genres = ["Action", "Comedy", "Drama"]
    inter = ["user_id:token\titem_id:token\trating:float\ttimestamp:float"]
    for u in range(30):
        for i in rng.choice(24, 8, replace=False):
            inter.append(f"u{u}\ti{i}\t4\t{rng.random():.6f}")
    item = ["item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq"]
    item += [f"i{i}\tMovie {i}\t{1990 + i}\t{genres[i % 3]}" for i in range(24)]
    (tmp_path / "d.inter").write_text("\n".join(inter) + "\n")
    (tmp_path / "d.item").write_text("\n".join(item) + "\n")
    return tmp_path / "d.inter", tmp_path / "d.item"


def test_train_then_recommend(tmp_path):
    inter, item = _files(tmp_path)
    r = CliRunner().invoke(
        app,
        [
            "train",
            str(inter),
            "--item",
            str(item),
            "-o",
            str(tmp_path / "m"),
            "--encoder",
            "hash",
            "--passes",
            "2",
            "--dim",
            "8",
            "--batch-size",
            "32",
        ],
    )
    assert r.exit_code == 0, r.output
    (tmp_path / "u.txt").write_text("u3\nu7\n")
    r = CliRunner().invoke(
        app,
        [
            "recommend",
            str(tmp_path / "m"),
            "--users",
            str(tmp_path / "u.txt"),
            "-k",
            "5",
            "-o",
            str(tmp_path / "r.csv"),
        ],
    )
    assert r.exit_code == 0, r.output
    with open(tmp_path / "r.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 10 and {x["user"] for x in rows} == {"u3", "u7"}
    seen = {(p[0], p[1]) for p in (line.split("\t") for line in inter.read_text().splitlines()[1:])}
    # recommendations never repeat a training item (validation/test items may appear)
    from icml26.cclrec.base import load

    m = load(tmp_path / "m")
    tr = m.train_.toarray() > 0
    uids, iids = m.config["user_ids"], m.config["item_ids"]
    for x in rows:
        assert not tr[uids.index(x["user"]), iids.index(x["item"])]
    assert seen
    (tmp_path / "bad.txt").write_text("nobody\n")
    r = CliRunner().invoke(
        app,
        [
            "recommend",
            str(tmp_path / "m"),
            "--users",
            str(tmp_path / "bad.txt"),
            "-o",
            str(tmp_path / "x.csv"),
        ],
    )
    assert r.exit_code != 0 and "unknown users" in str(r.exception)


def test_profiles_command_writes_a_resumable_cache(tmp_path):
    inter, item = _files(tmp_path)
    out = tmp_path / "p.jsonl"
    for _ in range(2):  # the second run finds everything cached
        r = CliRunner().invoke(app, ["profiles", str(item), "--lm", "stub:echo", "-o", str(out)])
        assert r.exit_code == 0, r.output
        assert "24 item profiles" in r.output
    lines = out.read_text().splitlines()
    assert len(lines) == 24 and "Movie 0 (1990)" in lines[0]
    r = CliRunner().invoke(
        app,
        [
            "profiles",
            str(item),
            "--inter",
            str(inter),
            "--lm",
            "stub:echo",
            "-o",
            str(tmp_path / "u.jsonl"),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "30 user profiles" in r.output
    r = CliRunner().invoke(app, ["profiles", str(tmp_path / "none.item"), "-o", str(out)])
    assert r.exit_code != 0 and "no such file" in str(r.exception)
