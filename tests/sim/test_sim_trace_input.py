"""Bad and awkward trace files: each error names file, row and column; order, BOM, empty files."""

import warnings

import pytest

from icml26.core.errors import UserError
from icml26.sim.metrics import summarize
from icml26.sim.trace import TraceOrderWarning, load_trace

AZ = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
NATIVE = "id,arrival_s,prompt_tokens,output_tokens\n"


def _write(tmp_path, body, name="t.csv", encoding="utf-8"):
    p = tmp_path / name
    p.write_text(body, encoding=encoding)
    return p


@pytest.mark.parametrize("body,match", [
    ("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.6805900,3\n", r"missing column\(s\) \['GeneratedTokens'\]"),
    ("arrival_s,prompt_tokens\n0,3\n", r"missing column\(s\) \[.output_tokens.\] for schema .native."),
    ("a,b,c\n1,2,3\n", "unknown trace header"),
    (AZ + "2023-11-16 18:15:46.6805900,10,2\n2023-11-16 18:15:47.0,-3,2\n", r"row 2, column 'ContextTokens'.*-3"),
    (NATIVE + "0,0.0,3,2\n1,1.0,3,2.5\n", r"row 2, column 'output_tokens'.*2\.5"),
    (NATIVE + "0,0.0,3,two\n", r"row 1, column 'output_tokens'.*'two'"),
    (NATIVE + "0,0.0,3,0\n", r"row 1, column 'output_tokens'.*>= 1"),
    (NATIVE + "0,-1.5,3,2\n", r"row 1, column 'arrival_s'.*>= 0"),
    (NATIVE + "0,nan,3,2\n", r"row 1, column 'arrival_s'"),
    (NATIVE + "0,0.0,3\n", r"row 1, column 'output_tokens'"),  # a short row
    (AZ, "no requests: a header and no data rows"),
    ("", "empty file"),
    ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n1,GPT-4,5,0,5,API log\n",
     "all 1 rows have 0 response tokens"),
])
def test_bad_files_name_file_row_and_column(tmp_path, body, match):
    p = _write(tmp_path, body)
    with pytest.raises(UserError, match=match) as e:
        load_trace(p)
    assert str(p) in str(e.value)


def test_out_of_order_rows_are_sorted_with_a_warning_and_no_negative_arrival(tmp_path):
    p = _write(tmp_path, AZ + "2023-11-16 00:00:10.0,10,2\n2023-11-16 00:00:04.0,20,3\n"
                              "2023-11-16 00:00:12.5,30,4\n2023-11-16 00:00:01.0,40,5\n")
    with pytest.warns(TraceOrderWarning, match=r"2 row\(s\) are out of time order \(first: row 2"):
        reqs = load_trace(p)
    assert [r.arrival_s for r in reqs] == pytest.approx([0.0, 3.0, 9.0, 11.5])
    assert [r.prompt_tokens for r in reqs] == [40, 20, 10, 30]
    assert [r.id for r in reqs] == [3, 1, 0, 2]  # ids stay the file's row numbers - 1
    with pytest.raises(UserError, match=r"t.csv: row 2, column 'TIMESTAMP': .* earlier than the row before"):
        load_trace(p, order="strict")


def test_sorted_file_loads_without_a_warning(tmp_path):
    p = _write(tmp_path, NATIVE + "0,0.0,3,2\n1,0.0,4,2\n2,2.0,5,2\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r.prompt_tokens for r in load_trace(p, order="strict")] == [3, 4, 5]


def test_utf8_bom_is_accepted(tmp_path):
    p = _write(tmp_path, AZ + "2023-11-16 00:00:00.0,10,2\n2023-11-16 00:00:02.0,20,3\n", encoding="utf-8-sig")
    assert p.read_bytes()[:3] == b"\xef\xbb\xbf"
    assert [(r.arrival_s, r.prompt_tokens) for r in load_trace(p)] == [(0.0, 10), (2.0, 20)]


def test_limit_is_checked_and_counts_requests(tmp_path):
    p = _write(tmp_path, NATIVE + "".join(f"{i},{i},3,2\n" for i in range(5)))
    assert len(load_trace(p, limit=2)) == 2
    with pytest.raises(UserError, match="limit must be >= 1"):
        load_trace(p, limit=0)


def test_summarize_of_nothing_is_a_user_error():
    with pytest.raises(UserError, match="no finished requests"):
        summarize([])
