"""Reading responses (CSV / Parquet, wide / long), bad input, bank JSON round trip."""

import json

import numpy as np
import pytest

from icml26.atlas import ItemBank, load_responses
from icml26.atlas.synth import random_bank
from icml26.core.errors import UserError


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_wide_and_long_agree(tmp_path):
    wide = write(tmp_path, "w.csv", "model,q1,q2,q3\nm1,1,0,\nm2,0,NA,1\n")
    long = write(
        tmp_path,
        "l.csv",
        "Item,model,correct,extra\nq1,m1,1,x\nq2,m1,0,x\nq1,m2,0,x\nq3,m2,1,x\nq3,m2,1,x\n",
    )
    rw, rl = load_responses(wide), load_responses(long)
    assert rw.models == rl.models == ["m1", "m2"]
    assert rw.items == ["q1", "q2", "q3"] and rl.items == ["q1", "q2", "q3"]
    np.testing.assert_array_equal(rw.matrix, rl.matrix)
    assert np.isnan(rw.matrix[0, 2]) and np.isnan(rw.matrix[1, 1])


def test_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    t = pa.table({"model": ["m1", "m1", "m2"], "item": ["a", "b", "a"], "correct": [1, 0, None]})
    pq.write_table(t, tmp_path / "r.parquet")
    r = load_responses(tmp_path / "r.parquet")
    assert r.matrix.shape == (2, 2) and r.matrix[0, 0] == 1 and np.isnan(r.matrix[1, 0])


@pytest.mark.parametrize(
    "text, match",
    [
        (
            "model,q1,q2\nm1,1,2\n",
            r"w.csv: model 'm1', item 'q2': value '2' is not 0, 1 or missing",
        ),
        ("model,q1,q1\nm1,1,0\n", "duplicate column 'q1'"),
        ("model,q1\nm1,1\nm1,0\n", "duplicate model id 'm1'"),
        ("model,q1\nm1,1,0\n", r"row 1 has 3 fields; the header has 2 .*\(line 2\)"),
    ],
)
def test_bad_wide(tmp_path, text, match):
    with pytest.raises(UserError, match=match):
        load_responses(write(tmp_path, "w.csv", text))


def test_bad_long(tmp_path):
    with pytest.raises(UserError, match="conflicting rows for model 'm1', item 'q1'"):
        load_responses(write(tmp_path, "l.csv", "model,item,correct\nm1,q1,1\nm1,q1,0\n"))
    with pytest.raises(UserError, match="missing correct"):
        load_responses(write(tmp_path, "l.csv", "model,item,score\nm1,q1,1\n"), layout="long")
    with pytest.raises(UserError, match="does not exist"):
        load_responses(tmp_path / "nope.csv")
    with pytest.raises(UserError, match="unknown extension"):
        load_responses(write(tmp_path, "r.xlsx", "x"))


def test_bank_json_round_trip(tmp_path):
    bank = random_bank(6, "3PL", seed=0)
    bank.a[0] = -0.4
    path = bank.save(tmp_path / "bank.json")
    obj = json.loads(path.read_text())
    assert obj["schema_version"] == 1 and obj["items"][0]["flags"] == ["nonpositive_a"]
    back = ItemBank.load(path)
    assert back.ids == bank.ids and back.model == "3PL"
    np.testing.assert_array_equal(back.a, bank.a)
    np.testing.assert_array_equal(back.g, bank.g)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda o: o.update(schema_version=9), "unknown schema_version 9"),
        (lambda o: o["items"][1].update(a=float("nan")), "'i1' field `a` must be a finite number"),
        (lambda o: o["items"][2].update(g=1.0), "g of item 'i2' must be in"),
        (lambda o: o["items"][0].pop("d"), "lacks field `d`"),
    ],
)
def test_bad_bank(tmp_path, mutate, match):
    obj = random_bank(4, "3PL").to_dict()
    mutate(obj)
    p = tmp_path / "b.json"
    p.write_text(json.dumps(obj))
    with pytest.raises(UserError, match=match):
        ItemBank.load(p)


@pytest.mark.parametrize(
    "raw",
    [
        b"\xef\xbb\xbfmodel,item,correct\nm1,q1,1\nm1,q2,0\nm2,q1,0\nm2,q2,1\n",
        b'\xef\xbb\xbf"Model";"Item";"Correct"\r\nm1;q1;1\r\nm1;q2;0\r\nm2;q1;0\r\nm2;q2;1\r\n',
    ],
)
def test_utf8_bom_on_a_long_csv_is_read(tmp_path, raw):
    # Excel's "CSV UTF-8" starts with a BOM; the header must still be recognised as long
    p = tmp_path / "bom.csv"
    p.write_bytes(raw)
    R = load_responses(p)
    assert R.models == ["m1", "m2"] and R.items == ["q1", "q2"]
    assert R.matrix.tolist() == [[1.0, 0.0], [0.0, 1.0]]
