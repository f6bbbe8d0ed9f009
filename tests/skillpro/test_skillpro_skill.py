import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.core.errors import UserError
from icml26.skillpro.skill import (
    Skill,
    SkillPool,
    kebab,
    load_pool,
    parse_skill_md,
    save_pool,
    skill_md,
)

line = (
    st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1, max_size=80)
    .map(str.strip)
    .filter(bool)
)
name = st.from_regex(r"\A[a-z0-9]{1,10}(-[a-z0-9]{1,10}){0,3}\Z")


@settings(max_examples=60, deadline=None)
@given(
    name,
    line,
    st.lists(line, min_size=3, max_size=5),
    line,
    st.floats(0, 1e6, allow_nan=False),
    st.floats(-1e3, 1e3, allow_nan=False),
    st.integers(0, 99),
    st.one_of(st.none(), line),
)
def test_skill_md_round_trip(n, init, steps, term, freq, gain, mat, parent):
    s = Skill(n, init, tuple(steps), term, freq=freq, total_gain=gain, maturity=mat, parent=parent)
    assert parse_skill_md(skill_md(s), folder=n) == s


def test_pool_round_trip_and_snapshot(tmp_path):
    pool = SkillPool.seeded(cap=4)
    pool.skills[0].freq, pool.skills[0].total_gain = 7, 1.5
    save_pool(pool, tmp_path)
    back = load_pool(tmp_path)
    assert back.skills == sorted(pool.skills, key=lambda s: s.name) and back.cap == 4
    assert json.loads((tmp_path / "pool.json").read_text())["cap"] == 4
    pool.remove("react-decision")
    save_pool(pool, tmp_path)  # stale folders removed
    assert not (tmp_path / "react-decision" / "SKILL.md").exists()


def test_hand_written_spec_file_loads(tmp_path):
    d = tmp_path / "code-breaker"
    d.mkdir()
    (d / "SKILL.md").write_text(
        "---\nname: code-breaker\ndescription: Use when cracking a hidden code from peg feedback.\n---\n"
        "1. Guess four different digits\n2. Keep only codes consistent with all feedback\n"
        "3. Guess one of them\n"
    )
    s = load_pool(tmp_path).get("code-breaker")
    assert s.steps[1] == "Keep only codes consistent with all feedback" and s.freq == 0


@pytest.mark.parametrize(
    "text, msg",
    [
        ("no front matter", "front matter"),
        ("---\ndescription: x\n---\n1. a\n2. b\n3. c\n", "'name'"),
        ("---\nname: other\ndescription: x\n---\n1. a\n2. b\n3. c\n", "folder"),
        ("---\nname: Bad_Name\ndescription: x\n---\n1. a\n2. b\n3. c\n", "kebab"),
        ("---\nname: ok\ndescription: x\n---\n1. a\n2. b\n", "2 steps"),
        (
            "---\nname: ok\ndescription: x\n---\n" + "".join(f"{i}. s\n" for i in range(1, 7)),
            "6 steps",
        ),
        ("---\nname: ok\ndescription: x\n---\n1. a\nfree text\n3. c\n", "numbered"),
    ],
)
def test_bad_skill_files_name_the_file(tmp_path, text, msg):
    d = tmp_path / "ok"
    d.mkdir()
    (d / "SKILL.md").write_text(text)
    with pytest.raises(UserError, match=msg) as e:
        load_pool(tmp_path)
    assert "SKILL.md" in str(e.value)


def test_cap_and_validation(tmp_path):
    pool = SkillPool.seeded(cap=2)
    pool.add(Skill("extra", "x", ("a", "b", "c"), "t"))
    with pytest.raises(UserError, match="cap"):
        save_pool(pool, tmp_path)
    save_pool(pool, tmp_path, force=True)
    with pytest.raises(UserError, match="cap"):
        load_pool(tmp_path)
    with pytest.raises(UserError, match="steps"):
        Skill("a", "x", ("a", "b"), "t")
    with pytest.raises(UserError, match="kebab"):
        Skill("A b", "x", ("a", "b", "c"), "t")
    assert kebab("HypothesisElimination v2") == "hypothesis-elimination-v2"
