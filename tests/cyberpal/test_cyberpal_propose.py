"""Format proposals + pairwise LLM judge, with StubChat models."""

import json

import pytest

from icml26.core.chat import StubChat
from icml26.cyberpal import enrich
from icml26.cyberpal.catalog import load_attack, load_cwe
from icml26.cyberpal.formats import default_formats, load_format
from icml26.cyberpal.pipeline import BuildConfig, build
from icml26.cyberpal.propose import _parse_verdict, choose_format, judge_pairwise

GOOD = """Here is my proposal:
```yaml
name: attack_tactic_first
task: attack_qa
system: You are a threat-intelligence analyst.
slots:
  - {label: Technique id, type: attack_id}
  - {label: Technique, type: attack_name}
  - {label: Evidence, type: quote}
  - {label: Answer, type: answer}
```"""
BAD_TYPE = "name: x\ntask: attack_qa\nslots:\n  - {label: Why, type: vibes}\n  - {label: A, type: answer}\n"
UNFILLABLE = ("name: free\ntask: attack_qa\nslots:\n  - {label: Thoughts, type: text}\n"
              "  - {label: Answer, type: answer}\n")


def _proposer(replies):
    it = iter(replies)

    def fn(msgs):
        if "Propose a different" in msgs[-1]["content"]:
            return next(it)
        return None
    return fn


def _stub(replies, verdict):
    prop = _proposer(replies)
    return StubChat(lambda msgs: prop(msgs) or verdict(msgs[-1]["content"]))


def _tasks(n=3):
    cwe, attack = load_cwe(), load_attack()
    return enrich.ground(enrich.attack_qa_tasks(attack)[:n], cwe, attack), cwe, attack


def _prefers(label):
    """A judge that prefers the answer containing ``label`` (position-independent)."""
    def verdict(text):
        a = text.split("Answer A:")[1].split("Answer B:")[0]
        return "A" if label in a else "B"
    return verdict


def test_proposals_filtered_and_judge_picks_preferred():
    tasks, cwe, attack = _tasks()
    fmt = default_formats()["attack_qa"]
    chat = _stub([GOOD, BAD_TYPE, UNFILLABLE], _prefers("Technique id:"))
    c = choose_format(fmt, tasks, chat, cwe, attack, n_proposals=3, n_examples=3)
    assert [f.name for f in c.candidates] == ["attack_qa_cot", "attack_tactic_first"]
    reasons = " | ".join(r["reason"] for r in c.rejected)
    assert "unknown type 'vibes'" in reasons and "fail the verifier" in reasons
    assert c.chosen.name == "attack_tactic_first"
    # 2 candidates x 2 orders x 3 examples, all parsed; the preferred one wins every time
    assert c.n_judged == 6 and c.n_unparsed == 0
    assert c.wins == [[0, 0], [6, 0]] and c.scores == [0.0, 1.0]


def test_position_bias_cancels_and_ties_keep_the_expert_format():
    tasks, cwe, attack = _tasks()
    fmt = default_formats()["attack_qa"]
    chat = _stub([GOOD], lambda text: "A")  # always the first position
    c = choose_format(fmt, tasks, chat, cwe, attack, n_proposals=1)
    assert c.scores[0] == c.scores[1] == 0.5 and c.chosen.name == fmt.name


@pytest.mark.parametrize("reply,want", [("A", "A"), ("b", "B"), ("B. It is grounded.", "B"),
                                        ("Answer: A", "A"), ("A or B", None), ("neither", None)])
def test_verdict_parser(reply, want):
    assert _parse_verdict(reply) == want


def test_wins_matrix_counts_both_orders():
    qt = [("q1", ["x1", "y1", "z1"]), ("q2", ["x2", "y2", "z2"])]
    rank = {"x": 0, "y": 2, "z": 1}  # y > z > x

    def verdict(msgs):
        t = msgs[-1]["content"]
        a = t.split("Answer A:\n")[1][0]
        b = t.split("Answer B:\n")[1][0]
        return "A" if rank[a] > rank[b] else "B"
    wins, judged, unparsed = judge_pairwise(qt, StubChat(verdict))
    assert judged == 12 and unparsed == 0
    assert wins == [[0, 0, 0], [4, 0, 4], [4, 0, 0]]
    for i in range(3):
        for j in range(3):
            if i != j:
                assert wins[i][j] + wins[j][i] == 4


def test_build_with_judge_writes_and_uses_the_chosen_format(tmp_path):
    chat = _stub([GOOD, BAD_TYPE], _prefers("Technique id:"))
    out = tmp_path / "d.jsonl"
    rep = build(out, BuildConfig(tasks=("attack_qa",), n_proposals=2), judge=chat)
    assert rep["format_choice"]["attack_qa"]["chosen"] == "attack_tactic_first"
    saved = load_format(tmp_path / "d.jsonl.work" / "formats" / "attack_qa.yaml")
    assert [s.type for s in saved.slots] == ["attack_id", "attack_name", "quote", "answer"]
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert recs and all(r["meta"]["format"] == "attack_tactic_first" for r in recs)
    assert all(r["messages"][-1]["content"].startswith("Technique id: T") for r in recs)
    n_calls = len(chat.calls)
    rep2 = build(out, BuildConfig(tasks=("attack_qa",), n_proposals=2), judge=chat)  # resume
    assert len(chat.calls) == n_calls and rep2["final"] == rep["final"]
