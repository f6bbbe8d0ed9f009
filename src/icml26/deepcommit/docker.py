"""Run a command agent inside a container: :func:`docker_command` wraps an agent template.

The wrapped command is an ordinary ``--agent-cmd`` template, so trials, logs and resume work as
without Docker. The workspace is bind-mounted at ``/workspace`` (the container's working
directory) and the task's SRS read-only at ``/task/SRS.md``; ``{workdir}`` and ``{srs}`` in the
inner command name those container paths, and ``{milestone}`` becomes ``"$DC_MILESTONE"``
(passed with ``-e``, so no value is quoted twice). The container runs as the calling user
(``--user UID:GID``), so files the agent writes stay the user's. ``docker`` may be any
docker-compatible CLI (``podman``) given by ``binary``.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence

from icml26.core.errors import UserError

__all__ = ["docker_command", "WORKDIR", "SRS"]

WORKDIR = "/workspace"
SRS = "/task/SRS.md"


def docker_command(template: str, image: str, binary: str = "docker",
                   extra_args: Sequence[str] = (), user: str | None = None) -> str:
    """An agent template that runs ``template`` in ``image`` (see the module docstring)."""
    if not template.strip():
        raise UserError("agent command is empty")
    if not image.strip() or any(c.isspace() for c in image):
        raise UserError(f"--docker: expected an image name such as python:3.11; got {image!r}")
    try:
        inner = template.format(workdir=WORKDIR, srs=SRS, milestone='"$DC_MILESTONE"')
    except (KeyError, IndexError) as e:
        raise UserError(f"agent command {template!r}: unknown placeholder {e}; "
                        "use {workdir}, {milestone}, {srs}") from None
    if user is None and hasattr(os, "getuid"):
        user = f"{os.getuid()}:{os.getgid()}"
    args = [binary, "run", "--rm", "-i"]
    if user:
        args += ["--user", user]
    # the outer template is formatted once more by the command agent: only these three fields
    outer = " ".join(shlex.quote(a) for a in args)
    outer += f" -v {{workdir}}:{WORKDIR} -v {{srs}}:{SRS}:ro -w {WORKDIR}"
    outer += f" -e DC_WORKDIR={WORKDIR} -e DC_SRS={SRS} -e DC_MILESTONE={{milestone}}"
    if extra_args:
        outer += " " + " ".join(shlex.quote(a).replace("{", "{{").replace("}", "}}") for a in extra_args)
    quoted = shlex.quote(inner).replace("{", "{{").replace("}", "}}")
    return f"{outer} {shlex.quote(image)} sh -c {quoted}"
