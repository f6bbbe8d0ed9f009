"""The verifier: correct traces pass, every planted error is caught, random corruption too."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icml26.cyberpal.catalog import load_attack, load_cwe
from icml26.cyberpal.enrich import attack_qa_tasks, cwe_qa_tasks, ground, write_template
from icml26.cyberpal.formats import default_formats, parse, render
from icml26.cyberpal.verify import verify_trace

CWE, ATT, FMT = load_cwe(), load_attack(), default_formats()


def _cve_trace(answer=79):
    t = {"task": "cve2cwe", "id": "CVE-2020-0001", "gold": [answer], "user": "q"}
    rec = write_template(ground([t], CWE), FMT)[0]
    return rec["messages"][-1]["content"], rec["meta"]


def _edit(text, label, value):
    lines = [f"{label}: {value}" if ln.startswith(f"{label}:") else ln for ln in text.splitlines()]
    return "\n".join(lines)


def test_template_traces_pass():
    text, meta = _cve_trace()
    assert text.splitlines()[-1] == "Answer: CWE-79: " + CWE[79].name
    assert verify_trace(text, FMT["cve2cwe"], meta, CWE).ok
    for rec in write_template(ground(cwe_qa_tasks(CWE, [79, 89, 20]), CWE), FMT):
        assert verify_trace(rec["messages"][-1]["content"], FMT["cwe_qa"], rec["meta"], CWE).ok
    for rec in write_template(ground(attack_qa_tasks(ATT, ["T1003", "T1059"]), CWE, ATT), FMT):
        v = verify_trace(rec["messages"][-1]["content"], FMT["attack_qa"], rec["meta"], CWE, ATT)
        assert v.ok, v.failures


@pytest.mark.parametrize("label,value,check", [
    ("Answer", "CWE-79: Improper Input Validation", "name"),
    ("Category", f"CWE-20: {CWE[20].name}", "parent"),
    ("Answer", f"CWE-89: {CWE[89].name}", "answer"),
    ("Definition", '"The product does not neutralize user input at all ever"', "quote"),
    ("Definition", "The product does not neutralize or incorrectly", "quote"),
    ("Impact", "Reduce Maintainability", "consequence"),
    ("Category", "CWE-99999: Nothing", "id_exists"),
    ("Answer", "", "format"),
])
def test_planted_errors_are_caught(label, value, check):
    text, meta = _cve_trace()
    bad = _edit(text, label, value) if value else "\n".join(text.splitlines()[:-1])
    v = verify_trace(bad, FMT["cve2cwe"], meta, CWE)
    assert not v.ok and check in v.failed_checks, v.failures


def test_deprecated_id_and_tactic_mismatch():
    text, meta = _cve_trace()
    dep = next(w for w in CWE.weaknesses.values() if w.deprecated)
    v = verify_trace(text + f"\nNote CWE-{dep.id}", FMT["cve2cwe"], meta, CWE)
    assert "deprecated" in v.failed_checks
    rec = write_template(ground(attack_qa_tasks(ATT, ["T1003"]), CWE, ATT), FMT)[0]
    bad = _edit(rec["messages"][-1]["content"], "Answer", "exfiltration")
    v = verify_trace(bad, FMT["attack_qa"], {**rec["meta"], "gold": ["exfiltration"]}, CWE, ATT)
    assert "tactic" in v.failed_checks


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([79, 89, 22, 787, 352]), st.integers(0, 3), st.data())
def test_random_slot_corruption_is_caught(answer, slot, data):
    text, meta = _cve_trace(answer)
    fmt = FMT["cve2cwe"]
    label = fmt.slots[slot].label
    old = parse(fmt, text)[label]
    # replace the value with a different value taken from another CWE's trace
    other = data.draw(st.sampled_from([c for c in (20, 74, 116, 400, 434, 94) if c != answer]))
    new = parse(fmt, _cve_trace(other)[0])[label]
    if new == old or (label == "Impact" and any(new == i.strip() for _, imp in CWE[answer].consequences
                                                 for i in imp.split(";"))):
        return  # not a corruption (shared value)
    vals = parse(fmt, text) | {label: new}
    assert not verify_trace(render(fmt, vals), fmt, meta, CWE).ok
