"""Cues: 18 channels + the memoize ablation, placement in the chat, naming text per task."""

import pytest

from icml26.algosteer.cues import CATEGORIES, CUES, build_messages, get_cue
from icml26.algosteer.tasks import TASKS
from icml26.core.errors import UserError


def test_channels_and_categories():
    channels = {c.channel for c in CUES.values()} - {
        "control",
        "memoization ablation",
        "algorithm naming",
    }
    assert len(channels) == 18
    assert {c.category for c in CUES.values()} == set(CATEGORIES)
    sem, surf = CUES["memo_semantic"], CUES["memo_surface"]
    assert sem.category == "semantic" and surf.category == "surface"
    # surface variant: same word stem, other typography
    strip = lambda text, word: text.lower().replace(word, "").rstrip(".!")  # noqa: E731
    assert strip(sem.text, "memoize") == strip(surf.text, "memo-ize")


@pytest.mark.parametrize("cue_id", ["none", "persona", "team_name", "performance", "naming"])
def test_placement(cue_id):
    task, cue = TASKS["fib"], CUES[cue_id]
    msgs = build_messages(task, cue)
    user = msgs[-1]["content"]
    assert task.prompt in user and "```python" in user
    if cue.place == "system":
        assert msgs[0] == {"role": "system", "content": cue.text}
    elif cue.place == "before":
        assert user.startswith(cue.text)
    elif cue.place == "after":
        assert user.rstrip().endswith(cue.text.replace("{named}", task.named[1]))
    else:
        assert len(msgs) == 1


def test_none_and_resampled_share_the_prompt():
    t = TASKS["tree"]
    assert build_messages(t, CUES["none"]) == build_messages(t, CUES["none_resampled"])


def test_unknown_cue_lists_near_names():
    with pytest.raises(UserError, match="did you mean memo_semantic"):
        get_cue("memo_semantc")
