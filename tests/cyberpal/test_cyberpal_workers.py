"""Worker memos (``--opt units=...``) merge into one run only when their configuration matches."""

import json

import pytest

from icml26.core.checkpoint import Memo
from icml26.core.errors import UserError
from icml26.cyberpal.claim import merge_memos


def test_merge_memos(tmp_path):
    cfg = {"n_cwes": 50, "scale": "small"}
    w1 = Memo(tmp_path / "w1" / "cyberpal" / "small" / "memo.json", config=cfg)
    w1.put("B/0", {"texts": ["b"]})
    w2 = Memo(tmp_path / "w2.json", config=cfg)
    w2.put("A/0", {"texts": ["a"]})
    w2.put("B/0", {"texts": ["other"]})  # already present from w1: not overwritten
    main = Memo(tmp_path / "main.json", config=cfg)
    main.put("base/0shot", {"texts": ["z"]})
    assert merge_memos(main, [str(tmp_path / "w1"), str(tmp_path / "w2.json")], "small") == 2
    assert main.get("B/0") == {"texts": ["b"]} and main.get("A/0") == {"texts": ["a"]}
    again = Memo(tmp_path / "main.json", config=cfg)  # persisted
    assert sorted(json.loads((tmp_path / "main.json").read_text())["units"]) == \
        ["A/0", "B/0", "base/0shot"] and len(again) == 3
    bad = Memo(tmp_path / "bad.json", config={**cfg, "n_cwes": 10})
    bad.put("A/0", {})
    with pytest.raises(UserError, match=r"different configuration \(\['n_cwes'\]\)"):
        merge_memos(main, [str(tmp_path / "bad.json")], "small")
    with pytest.raises(UserError, match="cannot read worker memo"):
        merge_memos(main, [str(tmp_path / "nope")], "small")
