"""Catalogue loaders against the shipped CWE 4.14 / ATT&CK 18.1 files, masking, bad input."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.core.errors import UserError
from icml26.cyberpal.catalog import cve_cwe_pairs, cve_year, load_attack, load_cwe, mask_cwe_ids


@pytest.fixture(scope="module")
def cwe():
    return load_cwe()


def test_cwe_counts_and_deprecation(cwe):
    assert cwe.version == "4.14"
    assert len(cwe.weaknesses) == 963
    assert sum(w.deprecated for w in cwe.weaknesses.values()) == 25


def test_parents_are_per_view(cwe):
    assert cwe.parents(79) == (74,)  # view 1000
    assert cwe.parents(89) == (943,)
    assert cwe.parents(89, view=1003) == (74,)
    assert 79 in cwe.children(74)
    assert cwe.related(79, 74) and cwe.related(74, 79) and not cwe.related(79, 89)
    assert 79 not in cwe.siblings(79) and 89 not in cwe.siblings(79)


def test_pairs_are_grouped_by_cve(cwe):
    pairs = cve_cwe_pairs(cwe)
    assert len(pairs) == 2032
    assert len({c for p in pairs for c in p.cwes}) == 548
    assert sum(len(p.cwes) for p in pairs) == 2952
    assert sum(len(p.cwes) > 1 for p in pairs) == 683
    assert len({p.cve_id for p in pairs}) == len(pairs)
    assert all(not cwe[c].deprecated for p in pairs for c in p.cwes)


def test_attack_techniques(tmp_path):
    att = load_attack()
    assert att.version == "18.1" and len(att.techniques) == 835
    t = att["T1003"]
    assert t.name == "OS Credential Dumping" and t.tactics == ("credential-access",)
    assert all("(Citation:" not in x.description for x in att.techniques.values())
    assert t.truncated and not t.description.endswith("...")
    assert att["T1002"].revoked and not att["T1002"].active


@settings(deadline=None)  # wall-time deadlines fail on a loaded machine
@given(st.lists(st.tuples(st.text(alphabet="abc .,()", max_size=8),
                          st.sampled_from(["CWE-", "cwe-", "CWE_", "CWE ", "CWE"]),
                          st.integers(0, 99999)), max_size=6))
def test_masking_removes_every_cwe_id(parts):
    text = " ".join(f"{a} {p}{n} " for a, p, n in parts)
    masked = mask_cwe_ids(text)
    assert not re.search(r"CWE[-_ ]?\d+", masked, flags=re.I)
    assert masked.count("[CWE]") == len(parts)


def test_bad_catalogue_files(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_cwe(tmp_path / "missing.xml")
    bad = tmp_path / "bad.xml"
    bad.write_text("<Other/>")
    with pytest.raises(UserError, match="unknown CWE schema"):
        load_cwe(bad)
    badj = tmp_path / "bad.json"
    badj.write_text('{"x": 1}')
    with pytest.raises(UserError, match="unknown ATT&CK lookup schema"):
        load_attack(badj)
    with pytest.raises(ValueError, match="not a CVE id"):
        cve_year("CVE-12-1")
