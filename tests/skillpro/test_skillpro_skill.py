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
        "3. Guess one of them\n\n## Termination\nThe feedback shows four black pegs.\n"
    )
    s = load_pool(tmp_path).get("code-breaker")
    assert s.steps[1] == "Keep only codes consistent with all feedback" and s.freq == 0
    assert s.termination == "The feedback shows four black pegs."


def test_body_states_activation_steps_and_termination_and_metadata_are_strings():
    import yaml

    s = Skill("bisect", "Use when a number is hidden in a known range.",
              ("Guess the middle", "Halve the range by the answer", "Repeat"),
              "# the range has one number left", freq=16.0, total_gain=2.5, maturity=3,
              parent="bisect@v1")
    text = skill_md(s)
    front = yaml.safe_load(text.split("---\n")[1])
    assert all(isinstance(v, str) for v in front["metadata"].values())
    assert front["metadata"]["freq"] == "16.0" and "termination" not in front["metadata"]
    body = text.split("---\n", 2)[2]
    assert "## When to use\nUse when a number is hidden in a known range." in body
    assert "## Steps\n1. Guess the middle\n2. Halve the range by the answer\n3. Repeat\n" in body
    # a line that would read as a heading is escaped, and read back as written
    assert "## When to stop\n\\# the range has one number left\n" in body
    assert parse_skill_md(text) == s


def test_exported_pool_passes_the_agent_skills_reference_validator(tmp_path):
    skills_ref = pytest.importorskip("skills_ref")
    pool = SkillPool.seeded(cap=10)
    pool.skills[0].freq, pool.skills[0].parent = 15.0, "x@v1"
    save_pool(pool, tmp_path)
    for s in pool:
        assert skills_ref.validate(tmp_path / s.name) == [], s.name
        props = skills_ref.read_properties(tmp_path / s.name)
        assert props.description == s.initiation
        assert all(isinstance(v, str) for v in props.metadata.values())


@pytest.mark.parametrize(
    "text, msg",
    [
        ("---\nname: ok\ndescription: x\n---\n1. a\n2. b\n3. c\n", "no '## When to stop' section"),
        ("---\nname: ok\ndescription: x\nmetadata:\n  termination: done\n---\n1. a\n2. b\n3. c\n",
         "metadata.termination is the old layout"),
        ("---\nname: ok\ndescription: x\n---\n## Steps\n1. a\n2. b\n3. c\n## When to stop\n\n",
         "no '## When to stop' section"),
        ("---\nname: ok\ndescription: x\nmetadata:\n  freq: many\n---\n## Steps\n1. a\n2. b\n3. c\n"
         "## When to stop\nnow\n", "metadata.freq must be a number; got 'many'"),
        ("---\nname: ok\ndescription: x\nmetadata:\n  maturity: '1.5'\n---\n## Steps\n1. a\n2. b\n"
         "3. c\n## When to stop\nnow\n", "metadata.maturity must be an integer"),
    ],
)
def test_import_needs_a_termination_section_and_numeric_metadata(tmp_path, text, msg):
    d = tmp_path / "ok"
    d.mkdir()
    (d / "SKILL.md").write_text(text)
    with pytest.raises(UserError, match=msg) as e:
        load_pool(tmp_path)
    assert "ok/SKILL.md" in str(e.value)


@pytest.mark.parametrize(
    "text, msg",
    [
        ("no front matter", "front matter"),
        ("---\ndescription: x\n---\n1. a\n2. b\n3. c\n", "'name'"),
        ("---\nname: other\ndescription: x\n---\n1. a\n2. b\n3. c\n", "folder"),
        ("---\nname: Bad_Name\ndescription: x\n---\n1. a\n2. b\n3. c\n", "kebab"),
        ("---\nname: ok\ndescription: x\n---\n1. a\n2. b\n## When to stop\nnow\n", "2 steps"),
        (
            "---\nname: ok\ndescription: x\n---\n" + "".join(f"{i}. s\n" for i in range(1, 7))
            + "## When to stop\nnow\n",
            "6 steps",
        ),
        ("---\nname: ok\ndescription: x\n---\n1. a\nfree text\n3. c\n## When to stop\nnow\n",
         "numbered"),
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
