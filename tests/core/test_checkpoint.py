"""The resumable memo: finished units survive a crash; a changed config starts afresh."""

import pytest

from icml26.core.checkpoint import Memo


def test_units_survive_an_interrupted_run(tmp_path):
    calls = []

    def unit(i):
        def f():
            calls.append(i)
            if i == 2:
                raise KeyboardInterrupt
            return {"i": i, "v": i * 0.5}

        return f

    memo = Memo(tmp_path / "m.json", config={"n": 3})
    with pytest.raises(KeyboardInterrupt):
        for i in range(3):
            memo.compute(f"u{i}", unit(i))
    again = Memo(tmp_path / "m.json", config={"n": 3})
    assert again.resumed == 2 and "u1" in again and "u2" not in again
    calls.clear()
    out = [again.compute(f"u{i}", unit(i) if i != 2 else (lambda: {"i": 2})) for i in range(3)]
    assert calls == [] and out[1] == {"i": 1, "v": 0.5} and out[2] == {"i": 2}


def test_changed_config_ignores_old_units(tmp_path):
    Memo(tmp_path / "m.json", config={"n": 3}).put("a", 1)
    fresh = Memo(tmp_path / "m.json", config={"n": 4})
    assert fresh.resumed == 0 and fresh.get("a") is None


def test_corrupt_memo_is_ignored(tmp_path):
    (tmp_path / "m.json").write_text('{"config": {}, "units": {"a": ')
    assert len(Memo(tmp_path / "m.json")) == 0


def test_source_fingerprint_tracks_file_contents(tmp_path, monkeypatch):
    import sys

    from icml26.core.checkpoint import source_fingerprint

    pkg = tmp_path / "fp_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    first = source_fingerprint("fp_pkg")
    assert source_fingerprint("fp_pkg") == first and len(first) == 16
    (pkg / "a.py").write_text("x = 2\n")
    assert source_fingerprint("fp_pkg") != first
    sys.modules.pop("fp_pkg", None)
    with pytest.raises(ValueError, match="no module"):
        source_fingerprint("no_such_pkg_xyz")


def test_memo_merge_from(tmp_path):
    main = Memo(tmp_path / "main.json", config={"n": 1})
    main.put("a", 1)
    worker = Memo(tmp_path / "w.json", config={"n": 1})
    worker.put("a", 99)  # already in main: main's value is kept
    worker.put("b", [2, 3])
    assert main.merge_from(tmp_path / "w.json") == 1
    assert main.get("a") == 1 and main.get("b") == [2, 3]
    assert Memo(tmp_path / "main.json", config={"n": 1}).get("b") == [2, 3]  # written to disk
    assert main.merge_from(tmp_path / "w.json") == 0
    Memo(tmp_path / "other.json", config={"n": 2}).put("c", 0)
    with pytest.raises(ValueError, match=r"different configuration \(\['n'\]\)"):
        main.merge_from(tmp_path / "other.json")
    assert "c" not in main
