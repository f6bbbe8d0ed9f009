"""Atomic writes: an interrupted write leaves the old file intact and no temporary behind."""

import json
import math

import pytest

from icml26.core.io import atomic_open, atomic_write_json, atomic_write_text


def test_write_then_overwrite(tmp_path):
    p = tmp_path / "a" / "b.json"
    atomic_write_json(p, {"x": 1})
    atomic_write_json(p, {"x": 2})
    assert json.loads(p.read_text()) == {"x": 2}
    assert sorted(x.name for x in p.parent.iterdir()) == ["b.json"]


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_interrupted_write_keeps_old_file(tmp_path, exc):
    p = tmp_path / "r.json"
    atomic_write_text(p, "old")
    with pytest.raises(exc), atomic_open(p, "w") as f:
        f.write("half of the new cont")
        raise exc("killed mid-write")
    assert p.read_text() == "old"
    assert [x.name for x in tmp_path.iterdir()] == ["r.json"]


def test_unserialisable_object_leaves_nothing(tmp_path):
    p = tmp_path / "r.json"
    with pytest.raises(TypeError, match="cannot write"):
        atomic_write_json(p, {"x": object()})
    assert list(tmp_path.iterdir()) == []


def test_nan_written_as_null(tmp_path):
    p = tmp_path / "n.json"
    atomic_write_json(p, {"a": math.nan, "b": [1.0, math.inf]})
    assert json.loads(p.read_text()) == {"a": None, "b": [1.0, None]}


def test_read_mode_refused(tmp_path):
    with pytest.raises(ValueError, match="mode"), atomic_open(tmp_path / "x", "r"):
        pass


def test_written_files_get_normal_permissions(tmp_path):
    import os

    p = atomic_write_text(tmp_path / "r.txt", "x")
    mask = os.umask(0)
    os.umask(mask)
    assert (p.stat().st_mode & 0o777) == (0o666 & ~mask)


def test_atomic_dir_replaces_whole_folder_or_nothing(tmp_path):
    from icml26.core.io import atomic_dir

    out = tmp_path / "model"
    with atomic_dir(out) as d:
        (d / "a.txt").write_text("1")
    with pytest.raises(RuntimeError), atomic_dir(out) as d:
        (d / "b.txt").write_text("half")
        raise RuntimeError("crash while writing")
    assert sorted(p.name for p in out.iterdir()) == ["a.txt"]
    with atomic_dir(out) as d:
        (d / "c.txt").write_text("2")
    assert sorted(p.name for p in out.iterdir()) == ["c.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_output_checks_name_the_path_before_any_work(tmp_path):
    import os

    from icml26.core.errors import UserError
    from icml26.core.io import check_output_dir, check_output_file

    a_file = tmp_path / "f.txt"
    a_file.write_text("x")
    assert check_output_dir(tmp_path / "new" / "deeper") == tmp_path / "new" / "deeper"
    assert not (tmp_path / "new").exists()  # checked, not created
    assert check_output_dir(tmp_path) == tmp_path
    with pytest.raises(UserError, match=r"results folder .*f\.txt is a file"):
        check_output_dir(a_file, "results folder")
    with pytest.raises(UserError, match=r"f\.txt is a file, not a folder"):
        check_output_dir(a_file / "sub")
    assert check_output_file(tmp_path / "out.json") == tmp_path / "out.json"
    assert check_output_file(a_file) == a_file
    with pytest.raises(UserError, match="exists"):
        check_output_file(a_file, overwrite=False)
    with pytest.raises(UserError, match=r"--out .* is a folder; give a file name"):
        check_output_file(tmp_path, "--out")
    with pytest.raises(UserError, match="is a file, not a folder"):
        check_output_file(a_file / "x.json")
    if os.geteuid() != 0:  # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(UserError, match="not writable"):
            check_output_dir(locked / "sub")
        with pytest.raises(UserError, match="not writable"):
            check_output_dir(locked)


def test_atomic_path_follows_the_umask_and_replaces_only_on_success(tmp_path):
    import os
    import stat

    from icml26.core.io import atomic_path

    target = tmp_path / "db.sqlite"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("writer failed")
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == [target.name]
    old = os.umask(0o027)
    try:
        with atomic_path(target) as tmp:
            tmp.write_text("new")
    finally:
        os.umask(old)
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # 0666 & ~0027, not mkstemp's 0600
