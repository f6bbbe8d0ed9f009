"""Formats: shipped defaults load, round trips, bad files name what is wrong."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.core.errors import UserError
from icml26.cyberpal.formats import Format, default_formats, load_formats, parse, render


def test_defaults_cover_the_three_tasks():
    f = default_formats()
    assert set(f) == {"cve2cwe", "cwe_qa", "attack_qa"}
    assert all(x.slots[-1].type == "answer" for x in f.values())
    assert Format.from_dict(f["cve2cwe"].to_dict()) == f["cve2cwe"]


@settings(deadline=None)  # wall-time deadlines fail on a loaded machine
@given(st.lists(st.text(alphabet="abcXYZ 0123-\"'", min_size=1, max_size=20)
                .filter(lambda s: s.strip()), min_size=4, max_size=4))
def test_render_parse_round_trip(values):
    fmt = default_formats()["cve2cwe"]
    vals = {s.label: v for s, v in zip(fmt.slots, values, strict=False)}
    assert parse(fmt, render(fmt, vals)) == {k: " ".join(v.split()) for k, v in vals.items()}


def test_bad_formats(tmp_path):
    with pytest.raises(UserError, match="empty format"):
        Format.from_dict({"name": "x", "task": "cve2cwe", "slots": []})
    with pytest.raises(UserError, match="unknown type 'colour'"):
        Format.from_dict({"name": "x", "task": "cve2cwe",
                          "slots": [{"label": "C", "type": "colour"}]})
    with pytest.raises(UserError, match="task must be one of"):
        Format.from_dict({"name": "x", "task": "poem", "slots": [{"type": "answer"}]})
    with pytest.raises(UserError, match="must be last"):
        Format.from_dict({"name": "x", "task": "cve2cwe",
                          "slots": [{"type": "answer"}, {"label": "Q", "type": "quote"}]})
    with pytest.raises(UserError, match="no \\*.yaml"):
        load_formats(tmp_path)
    (tmp_path / "a.yaml").write_text("name: a\ntask: cve2cwe\n")
    with pytest.raises(UserError, match="missing field"):
        load_formats(tmp_path)
