"""Each method's reader of user tables, fed random malformed variants of a valid small file.

A *repairable* change (byte-order mark, another delimiter, blank lines, CRLF, rows shuffled)
must parse exactly as the valid file; a *breaking* change (a duplicate or missing header name,
NaN/inf or garbage in a typed cell, an empty or header-only file) must raise a ``UserError``
that names the file; anything else (truncation, a dropped header, random bytes) may do either.
Never another exception, never a silent wrong result.
"""

from __future__ import annotations

import functools
import math
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icml26.core.errors import UserError


@dataclass
class Case:
    name: str
    header: list[str]
    rows: list[list[str]]
    typed: list[str]  # columns whose garbage/NaN must be refused
    nonfinite: tuple[str, ...] = ("nan", "inf", "-inf", "Infinity", "NaN")
    shuffle_ok: bool = True
    file: str = "t.csv"


def _trace(path: Path):
    from icml26.sim.trace import load_trace

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [(r.id, r.arrival_s, r.prompt_tokens, r.output_tokens, r.type) for r in load_trace(path)]


def _atlas(path: Path):
    from icml26.atlas.data import load_responses

    r = load_responses(path)
    mi, ii = sorted(range(len(r.models)), key=r.models.__getitem__), sorted(
        range(len(r.items)), key=r.items.__getitem__)
    cells = tuple(tuple("m" if math.isnan(r.matrix[a, b]) else r.matrix[a, b] for b in ii) for a in mi)
    return sorted(r.models), sorted(r.items), cells


def _cclrec(path: Path):
    from icml26.cclrec.data import load_interactions

    d = load_interactions(path)
    return sorted((d.user_ids[u], d.item_ids[i], float(r), float(t)) for u, i, r, t in
                  zip(d.users, d.items, d.ratings, d.timestamps, strict=True))


def _chemcensor(path: Path):
    from icml26.chemcensor.cli import _read_predictions

    return sorted((r["target"], r["reactants"], r["rank"], r["level"]) for r in
                  _read_predictions(path, ("target", "reactants", "rank")))


def _deepcommit(path: Path):
    from icml26.deepcommit.export import load_dataset

    ds = load_dataset(path.parent)
    return sorted(r["id"] for r in ds.milestones), sorted(ds.edges.items())


@functools.cache
def _cwe():
    from icml26.cyberpal.catalog import load_cwe

    return load_cwe()


def _cyberpal(path: Path):
    from icml26.cyberpal.pipeline import load_records

    return sorted((r["pair"].cve_id, r["pair"].description, r["pair"].cwes, r["group"])
                  for r in load_records(path, _cwe(), "vendor"))


CASES = {
    "trace": (_trace, Case("trace", ["id", "arrival_s", "prompt_tokens", "output_tokens", "type"],
                           [["0", "0.0", "3", "2", "chat"], ["1", "1.5", "4", "5", "code"],
                            ["2", "2.25", "6", "1", "chat"], ["3", "7", "9", "9", "chat"]],
                           ["arrival_s", "prompt_tokens", "output_tokens"])),
    "atlas": (_atlas, Case("atlas", ["model", "item", "correct"],
                           [["m1", "q1", "1"], ["m1", "q2", "0"], ["m2", "q1", "0"], ["m2", "q2", "1"],
                            ["m3", "q1", "1"]],
                           ["correct"], nonfinite=("inf", "-inf", "Infinity"))),
    "cclrec": (_cclrec, Case("cclrec", ["user", "item", "rating", "timestamp"],
                             [["u1", "i1", "4", "100"], ["u1", "i2", "3", "101"],
                              ["u2", "i1", "5", "99"], ["u3", "i3", "1", "300"]],
                             ["rating", "timestamp"])),
    "chemcensor": (_chemcensor, Case("chemcensor", ["target", "reactants", "rank", "level"],
                                     [["CCO", "CC.O", "1", "3"], ["CCO", "C.CO", "2", "1"],
                                      ["CCN", "CC.N", "1", "5"]],
                                     ["rank", "level"])),
    "deepcommit": (_deepcommit, Case("deepcommit", ["id", "title", "n_commits"],
                                     [["M001", "first", "2"], ["M002", "second", "1"],
                                      ["M003", "third", "4"]],
                                     ["id"], nonfinite=(), file="milestones.csv")),
    "cyberpal": (_cyberpal, Case("cyberpal", ["cve_id", "description", "cwe", "vendor"],
                                 [["CVE-2021-1001", "xss in the admin page", "CWE-79", "acme"],
                                  ["CVE-2021-1002", "sql injection in login", "CWE-89", "globex"],
                                  ["CVE-2021-1003", "path traversal in upload", "CWE-22", "acme"]],
                                 ["cve_id", "cwe"], nonfinite=())),
}

REPAIRABLE = ("bom", "delimiter", "blank_lines", "crlf", "shuffle", "quote")
BREAKING = ("dup_header", "drop_header_name", "nonfinite", "garbage", "empty", "header_only")
ANY = ("truncate", "drop_header", "random_bytes", "duplicate_row")
GARBAGE = st.from_regex(r"\A[ghjklmxyz]{1,6}\Z")  # no digits; cannot spell nan/inf/CVE/M0


def _text(header, rows, delim=",", eol="\n"):
    return "".join(delim.join(r) + eol for r in [header, *rows])


@st.composite
def variants(draw, case: Case):
    kind = draw(st.sampled_from(REPAIRABLE + BREAKING + ANY))
    header, rows = list(case.header), [list(r) for r in case.rows]
    if kind == "bom":
        return kind, ("\ufeff" + _text(header, rows)).encode()
    if kind == "delimiter":
        return kind, _text(header, rows, draw(st.sampled_from(["\t", ";", "|"]))).encode()
    if kind == "crlf":
        return kind, _text(header, rows, eol="\r\n").encode()
    if kind == "quote":
        return kind, _text(header, [[f'"{c}"' for c in r] for r in rows]).encode()
    if kind == "blank_lines":
        lines = _text(header, rows).splitlines(keepends=True)
        for _ in range(draw(st.integers(1, 3))):
            lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(["\n", "  \n", ",,\n"])))
        return kind, "".join(lines).encode()
    if kind == "shuffle":
        return kind, _text(header, draw(st.permutations(rows))).encode()
    if kind == "dup_header":
        a, b = draw(st.lists(st.integers(0, len(header) - 1), min_size=2, max_size=2, unique=True))
        header[a] = header[b]
        return kind, _text(header, rows).encode()
    if kind == "drop_header_name":
        del header[draw(st.integers(0, len(header) - 1))]
        return kind, _text(header, rows).encode()
    if kind in ("nonfinite", "garbage"):
        if kind == "nonfinite" and not case.nonfinite:
            kind = "garbage"
        col = case.header.index(draw(st.sampled_from(case.typed)))
        r = draw(st.integers(0, len(rows) - 1))
        rows[r][col] = draw(st.sampled_from(case.nonfinite) if kind == "nonfinite" else GARBAGE)
        return kind, _text(header, rows).encode()
    if kind == "empty":
        return kind, draw(st.sampled_from([b"", b"\n", b"\xef\xbb\xbf", b"  \n\n"]))
    if kind == "header_only":
        return kind, _text(header, []).encode()
    if kind == "truncate":
        data = _text(header, rows).encode()
        return kind, data[: draw(st.integers(0, len(data) - 1))]
    if kind == "drop_header":
        return kind, _text(rows[0], rows[1:]).encode()
    if kind == "duplicate_row":
        r = draw(st.integers(0, len(rows) - 1))
        return kind, _text(header, [*rows, rows[r]]).encode()
    return kind, draw(st.binary(max_size=64))


def _folder(tmp_path: Path, case: Case, data: bytes) -> Path:
    d = tmp_path / uuid.uuid4().hex[:8]
    d.mkdir()
    if case.name == "deepcommit":
        (d / "dependencies.csv").write_text("source,target,strength\nM001,M002,Strong\nM002,M003,Weak\n")
    p = d / case.file
    p.write_bytes(data)
    return p


@pytest.mark.parametrize("name", list(CASES))
def test_reader_on_malformed_files(tmp_path_factory, name):
    read, case = CASES[name]
    base = tmp_path_factory.mktemp(name)
    expected = read(_folder(base, case, _text(case.header, case.rows).encode()))

    @settings(max_examples=40, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(variants(case))
    def check(variant):
        kind, data = variant
        path = _folder(base, case, data)
        named = str(path.parent if name == "deepcommit" else path)
        try:
            got = read(path)
        except UserError as exc:
            assert named in str(exc), f"{kind}: the error does not name the file: {exc}"
            assert kind not in REPAIRABLE, f"{kind}: a repairable file was refused: {exc}"
            return
        assert kind not in BREAKING, f"{kind}: accepted a broken file, parsed as {got!r}"
        if kind in REPAIRABLE:
            assert got == expected, f"{kind}: parsed differently"
        if kind == "duplicate_row" and name in ("trace", "atlas", "cclrec", "cyberpal"):
            assert got == expected or name == "trace", "a repeated row changed the result"

    check()
