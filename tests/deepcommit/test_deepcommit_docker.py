"""deepcommit.docker: an agent template wrapped for a container, run through a fake `docker`."""
import json
import os
import sys
import textwrap

import pytest

from icml26.core.errors import UserError
from icml26.deepcommit.docker import SRS, WORKDIR, docker_command
from icml26.deepcommit.harness import _command_agent

# A stand-in for `docker run`: maps the bind mounts back to host paths in the command and the -w
# directory, sets the -e variables as given (a container sees them unmapped), then runs
# `sh -c CMD` on the host. Records its argv for the test.
FAKE = textwrap.dedent(f"""\
    #!{sys.executable}
    import json, os, shlex, subprocess, sys
    argv = sys.argv[1:]
    with open(os.environ["FAKE_DOCKER_LOG"], "a") as f:
        f.write(json.dumps(argv) + "\\n")
    assert argv[0] == "run"
    i, mounts, env, cwd = 1, {{}}, dict(os.environ), None
    while argv[i].startswith("-"):
        flag = argv[i]
        if flag in ("--rm", "-i"):
            i += 1
            continue
        val = argv[i + 1]
        if flag == "-v":
            host, cont = val.split(":")[:2]
            mounts[cont] = host
        elif flag == "-w":
            cwd = val
        elif flag == "-e":
            k, v = val.split("=", 1)
            env[k] = v
        i += 2
    image, rest = argv[i], argv[i + 1:]
    assert rest[:2] == ["sh", "-c"], rest
    def host(s, quote=True):
        for c in sorted(mounts, key=len, reverse=True):
            s = s.replace(c, shlex.quote(mounts[c]) if quote else mounts[c])
        return s
    sys.exit(subprocess.run(["sh", "-c", host(rest[2])], cwd=host(cwd, quote=False), env=env).returncode)
""")


@pytest.fixture
def fake_docker(tmp_path, monkeypatch):
    path = tmp_path / "bin" / "docker"
    path.parent.mkdir()
    path.write_text(FAKE)
    path.chmod(0o755)
    log = tmp_path / "docker.log"
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(log))
    return path, log


def _task(tmp_path, text="Implement the parser.\n"):
    ws = tmp_path / "work space"  # a space: the mount must be quoted
    ws.mkdir()
    srs = tmp_path / "SRS.md"
    srs.write_text(text)
    return ws, {"milestone": "M007", "srs_path": str(srs)}


def test_agent_runs_in_the_container_paths(tmp_path, fake_docker):
    binary, log = fake_docker
    ws, task = _task(tmp_path)
    inner = ('echo {milestone} > {workdir}/done.txt && cat {srs} >> done.txt && '
             "env | grep ^DC_ | sort > env.txt && printf '%s' {{braces}} > braces.txt")
    cmd = docker_command(inner, "python:3.11-slim", binary=str(binary), user="1000:1000")
    agent = _command_agent(cmd, timeout_s=60, log_dir=tmp_path / "logs")
    assert agent(ws, task) is True
    assert (ws / "done.txt").read_text() == "M007\nImplement the parser.\n"
    assert (ws / "braces.txt").read_text() == "{braces}"
    assert (ws / "env.txt").read_text().split() == [
        "DC_MILESTONE=M007", f"DC_SRS={SRS}", f"DC_WORKDIR={WORKDIR}"]
    argv = json.loads(log.read_text().splitlines()[0])
    assert argv[:5] == ["run", "--rm", "-i", "--user", "1000:1000"]
    assert f"{ws}:{WORKDIR}" in argv and f"{task['srs_path']}:{SRS}:ro" in argv
    assert "DC_MILESTONE=M007" in argv and argv[argv.index("python:3.11-slim") + 1] == "sh"
    # the inner command never sees host paths: they only appear in the mounts
    inner_cmd = argv[-1]
    assert str(ws) not in inner_cmd and "/workspace" in inner_cmd and '"$DC_MILESTONE"' in inner_cmd


def test_a_failing_agent_in_the_container_gives_up(tmp_path, fake_docker):
    binary, _ = fake_docker
    ws, task = _task(tmp_path)
    agent = _command_agent(docker_command("exit 3", "img", binary=str(binary)), timeout_s=60)
    assert agent(ws, task) is False


def test_default_user_is_the_caller(tmp_path):
    cmd = docker_command("true", "img")
    assert f"--user {os.getuid()}:{os.getgid()}" in cmd


@pytest.mark.parametrize("template, image, match", [
    ("", "img", "empty"),
    ("run {task}", "img", "unknown placeholder"),
    ("true", "", "image name"),
    ("true", "my image", "image name"),
])
def test_bad_docker_settings(template, image, match):
    with pytest.raises(UserError, match=match):
        docker_command(template, image)
