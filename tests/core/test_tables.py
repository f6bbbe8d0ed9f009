"""The shared table reader: one test per rule, each error naming file, row and column."""

import warnings

import pytest

from icml26.core.errors import UserError
from icml26.core.tables import TableOrderWarning, integer, number, read_table


def _w(tmp_path, text, name="t.csv", encoding="utf-8"):
    p = tmp_path / name
    p.write_text(text, encoding=encoding, newline="")
    return p


def test_plain_csv_rows_numbers_and_lines(tmp_path):
    t = read_table(_w(tmp_path, "a,b\n1,x\n\n2,y\n"), types={"a": int})
    assert t.columns == ["a", "b"]
    assert t.rows == [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]
    assert t.row_numbers == [1, 2] and t.lines == [2, 4]  # the blank line is skipped, not counted


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16"])
def test_byte_order_mark_is_dropped(tmp_path, encoding):
    t = read_table(_w(tmp_path, "name,n\nx,1\n", encoding=encoding), required=["name"])
    assert t.columns == ["name", "n"] and t.rows[0]["name"] == "x"


@pytest.mark.parametrize("delim", [",", "\t", ";", "|"])
def test_delimiter_is_sniffed(tmp_path, delim):
    text = delim.join(["a", "b", "c"]) + "\n" + delim.join(["1", "2,5" if delim != "," else "2", "3"]) + "\n"
    t = read_table(_w(tmp_path, text, name="t.txt"))
    assert t.delimiter == delim and t.columns == ["a", "b", "c"]


def test_one_column_file_keeps_the_extension_delimiter(tmp_path):
    assert read_table(_w(tmp_path, "rxn\nC>>C\n")).rows == [{"rxn": "C>>C"}]
    assert read_table(_w(tmp_path, "a,b\tc\n1,2\t3\n", name="t.tsv")).columns == ["a,b", "c"]


@pytest.mark.parametrize("text", ["", "\n\n  \n"])
def test_empty_file(tmp_path, text):
    p = _w(tmp_path, text)
    with pytest.raises(UserError, match=f"{p}: empty file"):
        read_table(p)


def test_header_only(tmp_path):
    p = _w(tmp_path, "a,b\n\n")
    with pytest.raises(UserError, match=f"{p}: no requests: a header and no data rows"):
        read_table(p, what="requests")
    assert len(read_table(p, allow_empty=True)) == 0


def test_duplicate_header(tmp_path):
    p = _w(tmp_path, "a,b,a\n1,2,3\n")
    with pytest.raises(UserError, match=rf"{p}: duplicate column 'a' in the header \(columns 1 and 3\)"):
        read_table(p)
    with pytest.raises(UserError, match="duplicate column '' "):
        read_table(_w(tmp_path, ",b,\n1,2,3\n"))
    assert read_table(_w(tmp_path, ",b\nm,2\n")).columns == ["", "b"]  # one unnamed index column


def test_missing_required_lists_found(tmp_path):
    p = _w(tmp_path, "a,b\n1,2\n")
    with pytest.raises(UserError, match=r"missing column\(s\) c; found a, b"):
        read_table(p, required=["a", "c"])


def test_ragged_rows(tmp_path):
    with pytest.raises(UserError, match=r"row 2 has 3 fields; the header has 2 .*\(line 3\)"):
        read_table(_w(tmp_path, "a,b\n1,2\n1,2,3\n"))
    with pytest.raises(UserError, match=r"row 1, column 'b': missing .*\(line 2\)"):
        read_table(_w(tmp_path, "a,b\n1\n"))
    assert read_table(_w(tmp_path, "a,b\n1,2,,\n")).rows == [{"a": "1", "b": "2"}]  # empty extras


def test_bad_value_names_file_row_column_and_line(tmp_path):
    p = _w(tmp_path, "a,b\n1,2\n\n3,x\n")
    with pytest.raises(UserError, match=rf"{p}: row 2, column 'b': expected a number, got 'x' \(line 4\)"):
        read_table(p, types={"b": float})
    with pytest.raises(UserError, match=r"row 1, column 'a': expected an integer >= 2, got '1'"):
        read_table(p, types={"a": integer(2)})
    with pytest.raises(UserError, match=r"row 1, column 'a': empty value; expected an integer"):
        read_table(_w(tmp_path, "a,b\n,2\n"), types={"a": int})
    assert read_table(_w(tmp_path, "a,b\n,2\n"), types={"a": int}, nullable={"a"}).rows[0]["a"] is None
    with pytest.raises(UserError, match=r"row 1, column 'b': cannot parse '2'"):
        read_table(p, types={"b": lambda v: int("q" + v)}, max_rows=1)


@pytest.mark.parametrize("token", ["nan", "NaN", "inf", "-Infinity"])
def test_nonfinite_refused_unless_allowed(tmp_path, token):
    p = _w(tmp_path, f"a,b\n1,{token}\n")
    with pytest.raises(UserError, match=rf"row 1, column 'b': '{token}' is not a finite number"):
        read_table(p, types={"b": float})
    assert read_table(p, types={"b": number()}, allow_nonfinite={"b"}).rows[0]["b"] != 0
    assert read_table(p, types={"b": float}, allow_nonfinite=True)


def test_integer_parser():
    p = integer(1)
    assert p("3") == 3 and p("3.0") == 3 and p(3.0) == 3 and p(" 7 ") == 7
    for bad in ("2.5", "0", "x", "nan", True):
        with pytest.raises(ValueError):
            p(bad)


def test_unsorted_timestamps_sorted_with_a_note_or_refused(tmp_path):
    p = _w(tmp_path, "t,v\n1,a\n3,b\n2,c\n0,d\n")
    with pytest.warns(TableOrderWarning, match=r"2 row\(s\) are out of order \(first: row 3, column 't'\)"):
        t = read_table(p, types={"t": float}, sort_by="t")
    assert [r["v"] for r in t.rows] == ["d", "a", "c", "b"]
    assert t.row_numbers == [4, 1, 3, 2] and t.notes and "sorted by 't'" in t.notes[0]
    with pytest.raises(UserError, match=rf"{p}: row 3, column 't': 2.0 is earlier than the row before"):
        read_table(p, types={"t": float}, sort_by="t", on_unsorted="refuse")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_table(_w(tmp_path, "t\n1\n1\n2\n"), types={"t": float}, sort_by="t", on_unsorted="refuse")


def test_jsonl(tmp_path):
    t = read_table(_w(tmp_path, '{"a": 1, "b": "x"}\n\n{"a": 2}\n', name="t.jsonl"))
    assert t.columns == ["a", "b"] and t.rows == [{"a": 1, "b": "x"}, {"a": 2}] and t.lines == [1, 3]
    with pytest.raises(UserError, match=r"t.jsonl: row 2: not JSON .*\(line 3\)"):
        read_table(_w(tmp_path, '{"a": 1}\n\n{"a": \n', name="t.jsonl"))
    with pytest.raises(UserError, match=r"row 1, column 'a': the key is given twice"):
        read_table(_w(tmp_path, '{"a": 1, "a": 2}\n', name="t.jsonl"))
    with pytest.raises(UserError, match=r"row 1: expected a JSON object"):
        read_table(_w(tmp_path, '[1, 2]\n', name="t.jsonl"))
    with pytest.raises(UserError, match=r"row 2: no 'b' key"):
        read_table(_w(tmp_path, '{"a": 1, "b": 2}\n{"a": 2}\n', name="t.jsonl"), required=["b"])
    with pytest.raises(UserError, match=r"row 1, column 'a': nan is not a finite number"):
        read_table(_w(tmp_path, '{"a": NaN}\n', name="t.jsonl"), types={"a": float})
    with pytest.raises(UserError, match="no rows"):
        read_table(_w(tmp_path, "", name="t.jsonl"))


def test_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"t": [2.0, 1.0], "n": [1, None]}), tmp_path / "t.parquet")
    with pytest.warns(TableOrderWarning):
        t = read_table(tmp_path / "t.parquet", types={"n": int}, nullable={"n"}, sort_by="t")
    assert t.rows == [{"t": 1.0, "n": None}, {"t": 2.0, "n": 1}] and t.lines == [None, None]
    with pytest.raises(UserError, match=r"t.parquet: row 2, column 'n': empty value"):
        read_table(tmp_path / "t.parquet", types={"n": int})
    pq.write_table(pa.table({"t": pa.array([], pa.float64())}), tmp_path / "e.parquet")
    with pytest.raises(UserError, match="e.parquet: no rows"):
        read_table(tmp_path / "e.parquet")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(UserError, match="bad.parquet: not a readable Parquet file"):
        read_table(tmp_path / "bad.parquet")


def test_binary_and_non_utf8_and_missing_files(tmp_path):
    (tmp_path / "b.csv").write_bytes(b"a,b\n\x00\x01,2\n")
    with pytest.raises(UserError, match="b.csv: contains NUL bytes"):
        read_table(tmp_path / "b.csv")
    (tmp_path / "l.csv").write_bytes("a,b\ncaf\u00e9,2\n".encode("latin-1"))
    with pytest.raises(UserError, match="l.csv: not UTF-8 text"):
        read_table(tmp_path / "l.csv")
    assert read_table(tmp_path / "l.csv", encoding_errors="replace").rows[0]["a"] == "caf\ufffd"
    with pytest.raises(UserError, match="nope.csv: no such file"):
        read_table(tmp_path / "nope.csv")
    with pytest.raises(UserError, match="is a folder"):
        read_table(tmp_path)


def test_typed_header_and_strip(tmp_path):
    t = read_table(_w(tmp_path, "user_id:token\titem_id:token\n u1 \ti1\n", name="d.inter"),
                   typed_header=True)
    assert t.columns == ["user_id", "item_id"] and t.rows[0]["user_id"] == "u1"
    p = _w(tmp_path, 'a,b\n" x ",1\n')
    assert read_table(p, strip=False).rows[0]["a"] == " x "


def test_quoted_fields_with_delimiters_and_newlines(tmp_path):
    t = read_table(_w(tmp_path, 'a,b\n"x, y","line1\nline2"\n3,4\n'))
    assert t.rows[0] == {"a": "x, y", "b": "line1\nline2"} and t.lines == [2, 4]
