"""Child side of the sandbox: runs ONE generated program against a task's test cases.

Standard library only; :mod:`icml26.algosteer.sandbox` runs this file's source with
``python -I -S -c`` in a fresh process (or forks it from a zygote, see ``serve``), never in the
caller's interpreter. The request (JSON on stdin, or one line per request in zygote mode)::

    {"code": str, "harness": str, "entry": str, "alias_entry": bool,
     "cases": [{"expr": str, "expected": str}], "mem_mb": int, "cpu_s": int,
     "max_output": int, "drop_uid": int | null, "result_path": str}

Order in the child: open the result file, set rlimits (address space, CPU seconds, file size,
open files, processes), drop root to ``drop_uid`` (when root), then ``exec`` the program, then the
task's harness, then evaluate each case. The result (JSON, written once to ``result_path``)::

    {"stage": "done" | "load", "error": str | null, "cases": [{"ok": bool, "error": str | null}]}

This is damage control for honest-but-buggy model output (loops, memory bombs, floods), not a
security boundary.
"""

import contextlib
import json
import os
import sys


class _CappedWriter:
    """sys.stdout / sys.stderr stand-in that keeps at most ``cap`` characters and drops the rest."""

    def __init__(self, cap):
        self.cap, self.n, self.parts = cap, 0, []

    def write(self, s):
        s = str(s)
        room = self.cap - self.n
        if room > 0:
            self.parts.append(s[:room])
        self.n += len(s)
        return len(s)

    def flush(self):
        pass

    def isatty(self):
        return False


def _limit(resource, which, value):
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(which, (value, value))


# Imported before privileges drop: the interpreter's own files may be unreadable to ``nobody``
# (e.g. a Python under /root), and these cover what generated programs import.
PRELOAD = [
    "abc",
    "array",
    "bisect",
    "collections",
    "collections.abc",
    "copy",
    "dataclasses",
    "decimal",
    "enum",
    "fractions",
    "functools",
    "heapq",
    "itertools",
    "math",
    "numbers",
    "operator",
    "queue",
    "random",
    "re",
    "statistics",
    "string",
    "sys",
    "threading",
    "time",
    "types",
    "typing",
]


def _preload():
    import importlib

    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def _apply_limits(req):
    import resource
    import signal

    _preload()  # a no-op in a zygote's child: the zygote preloaded before forking

    mb = int(req["mem_mb"])
    _limit(resource, resource.RLIMIT_AS, mb * 1024 * 1024)
    _limit(resource, resource.RLIMIT_DATA, mb * 1024 * 1024)
    _limit(resource, resource.RLIMIT_CPU, int(req["cpu_s"]))
    _limit(resource, resource.RLIMIT_FSIZE, int(req["max_output"]))
    _limit(resource, resource.RLIMIT_NOFILE, 64)
    _limit(resource, resource.RLIMIT_CORE, 0)
    _limit(resource, resource.RLIMIT_NPROC, int(req.get("max_procs", 0)))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write fails instead of killing
    uid = req.get("drop_uid")
    if uid is not None and os.geteuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)


def _short(exc):
    return (type(exc).__name__ + ": " + str(exc))[:300]


def run_one(req):
    """Run one request in this (already isolated) process; write the result file; never return
    normally to a caller that could keep going with the program's state."""
    fd = os.open(req["result_path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    result = {"stage": "load", "error": None, "cases": []}

    def finish():
        data = json.dumps(result).encode()[: 1 << 20]
        os.write(fd, data)
        os.close(fd)
        os._exit(0)

    os.chdir(os.path.dirname(req["result_path"]))
    _apply_limits(req)
    sys.stdout = _CappedWriter(int(req["max_output"]))
    sys.stderr = _CappedWriter(int(req["max_output"]))
    sys.stdin = open(os.devnull)  # noqa: SIM115 - lives as long as the process
    sys.setrecursionlimit(int(req.get("recursion_limit", 1000)))
    ns = {"__name__": "__sandbox__", "__builtins__": __builtins__}
    try:
        exec(compile(req["code"], "<program>", "exec"), ns)
    except BaseException as exc:  # noqa: BLE001 - SystemExit, MemoryError, anything
        result["error"] = _short(exc)
        finish()
    result["stage"] = "done"
    entry = req["entry"]
    if entry not in ns and req.get("alias_entry"):
        import types

        own = [
            k
            for k, v in ns.items()
            if isinstance(v, (types.FunctionType, type))
            and getattr(v, "__module__", None) == "__sandbox__"
            and not k.startswith("_")
        ]
        kinds = [k for k in own if isinstance(ns[k], type) == req.get("entry_is_class", False)]
        if len(kinds) == 1:
            ns[entry] = ns[kinds[0]]
    try:
        exec(compile(req["harness"], "<harness>", "exec"), ns)
    except BaseException as exc:  # noqa: BLE001
        result["error"] = "harness: " + _short(exc)
        finish()
    for case in req["cases"]:
        try:
            got = eval(case["expr"], ns)
            want = eval(case["expected"], ns)
            ok = bool(got == want)
            result["cases"].append({"ok": ok, "error": None if ok else "wrong answer"})
        except BaseException as exc:  # noqa: BLE001
            result["cases"].append({"ok": False, "error": _short(exc)})
            if isinstance(exc, MemoryError):
                break
    finish()


def serve():
    """Zygote mode: read one JSON request per line on stdin; fork a child per request; the
    parent waits (wall-clock deadline ``wall_s``), kills the child's process group when late, and
    answers one JSON line ``{"status": int, "timed_out": bool, "wall_s": float}``."""
    import signal
    import time

    out = sys.stdout
    _preload()
    for line in sys.stdin:
        req = json.loads(line)
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                run_one(req)
            finally:
                os._exit(3)
        deadline = t0 + float(req["wall_s"])
        timed_out, status = False, None
        while True:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
                break
            if time.perf_counter() > deadline:
                timed_out = True
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
                break
            time.sleep(0.002)
        with contextlib.suppress(OSError):  # stragglers the program may have started
            os.killpg(pid, signal.SIGKILL)
        out.write(
            json.dumps(
                {
                    "status": os.waitstatus_to_exitcode(status),
                    "timed_out": timed_out,
                    "wall_s": time.perf_counter() - t0,
                }
            )
            + "\n"
        )
        out.flush()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        serve()
    else:
        run_one(json.loads(sys.stdin.read()))
