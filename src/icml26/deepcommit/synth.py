"""Generated Python repositories with known milestones and dependencies (the claim's data).

:func:`make_repo` writes a real package (``pkg/``, pytest tests in ``tests/``) through scripted,
interleaved commits with deterministic authors and dates. Each *feature* is one true milestone:
a module plus tests, built over several commits; a feature may import an earlier feature
(Strong edge), change a line another feature wrote (Weak edge, a cross-feature touch-up), and
receive a late bug fix with a test. Noise: typo commits (kept by preprocessing, excluded from
ARI), formatting-only commits, bot version bumps, and commit/revert pairs (all to be dropped);
some messages are uninformative ("wip"). Message styles vary by author.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["RepoTruth", "make_repo", "TOPICS"]

TOPICS = {
    "cache": ["LRU cache", "cache eviction", "cache key hashing", "memoized lookups"],
    "parser": ["config parser", "token parsing", "parse nested sections", "syntax errors"],
    "retry": ["retry with backoff", "exponential backoff", "retry limits", "transient failures"],
    "metrics": ["metrics counters", "latency histogram", "export metrics", "gauge values"],
    "auth": ["token authentication", "password hashing", "login session", "permission checks"],
    "storage": ["file storage backend", "atomic writes to disk", "storage paths", "blob store"],
    "render": ["HTML rendering", "template rendering", "escape markup", "render tables"],
    "schedule": ["job scheduler", "cron expressions", "scheduled tasks", "task queue timing"],
}
DEVS = [
    ("Ada Park", "ada@example.org"),
    ("Bo Chen", "bo@example.org"),
    ("Cy Diaz", "cy@example.org"),
    ("Dee Evans", "dee@example.org"),
]
STYLES = ["conventional", "plain", "terse", "ticket"]
#: shared modules that ``spread`` puts features' functions in
SHARED = ("pkg/common.py", "pkg/helpers.py")


@dataclass
class RepoTruth:
    """Ground truth: ``label[sha]`` = feature index, or -1 for a noise commit that survives
    preprocessing (typos); ``dropped`` = shas preprocessing must drop, with their kind;
    ``edges`` = {(src feature, dst feature): "Strong"|"Weak"}."""

    path: Path
    topics: list[str]
    label: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)
    edges: dict[tuple[int, int], str] = field(default_factory=dict)

    @property
    def mean_size(self) -> float:
        sizes = np.bincount([v for v in self.label.values() if v >= 0])
        return float(sizes[sizes > 0].mean())


TOPIC_FREE = (
    "Update code",
    "Address review comments",
    "Small improvements",
    "Follow-up changes",
    "Implement requested changes",
    "Clean up and extend",
)


def _msg(rng, topic: str, style: str, kind: str, detail: str) -> str:
    if style == "topicfree":  # an author whose messages never name the feature
        return str(rng.choice(TOPIC_FREE))
    phrase = TOPICS[topic][int(rng.integers(len(TOPICS[topic])))]
    if rng.random() < 0.12:
        return str(rng.choice(["wip", "address review comments", "more changes", "update"]))
    verb = {"new": "add", "grow": "extend", "fix": "fix", "touch": "tidy"}[kind]
    if style == "conventional":
        return f"{'fix' if kind == 'fix' else 'feat'}({topic}): {verb} {phrase} ({detail})"
    if style == "plain":
        return f"{verb.capitalize()} {phrase} in {topic} module: {detail}"
    if style == "ticket":
        return f"[{topic.upper()}-{int(rng.integers(10, 99))}] {verb} {phrase}"
    return f"{topic}: {detail}"


class _Writer:
    def __init__(self, path: Path):
        self.path, self.files = path, {}
        path.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str, env: dict | None = None) -> str:
        full = {
            **os.environ,
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_CONFIG_NOSYSTEM": "1",
            **(env or {}),
        }
        return subprocess.run(
            ["git", "-C", str(self.path), *args],
            check=True,
            env=full,
            capture_output=True,
            text=True,
        ).stdout

    def commit(self, message: str, author: tuple[str, str], t: int) -> str:
        for rel, lines in self.files.items():
            p = self.path / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            text = "\n".join(lines) + "\n"
            if not p.exists() or p.read_text() != text:
                p.write_text(text)
        date = f"@{t} +0000"
        env = {
            "GIT_AUTHOR_NAME": author[0],
            "GIT_AUTHOR_EMAIL": author[1],
            "GIT_COMMITTER_NAME": author[0],
            "GIT_COMMITTER_EMAIL": author[1],
            "GIT_AUTHOR_DATE": date,
            "GIT_COMMITTER_DATE": date,
        }
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message, env=env)
        return self.git("rev-parse", "HEAD").strip()


def make_repo(
    path: Path | str,
    seed: int,
    n_features: int = 6,
    n_commits: int = 60,
    noise: float = 0.2,
    shared: float = 0.35,
    mixed: float = 0.15,
    refactor: bool = True,
    topic_free: int = 0,
    refactors: int = 1,
    spread: float = 0.0,
) -> RepoTruth:
    """Write a repository of about ``n_commits`` commits into the empty folder ``path``.

    ``n_features`` (<= 8) true milestones; ``noise`` = share of noise commits; ``shared`` =
    chance a growth commit also registers in the shared ``pkg/cli.py``; ``mixed`` = chance it also
    appends to another feature's module; ``refactor``: one cross-feature refactor (type hints on
    every existing ``*_fn0``) at mid-history, labelled -1 (it belongs to no feature);
    ``refactors`` > 1 interleaves more cross-feature refactors (a ``REVIEWED_<k> = True`` line in every
    existing module), evenly over the history; ``topic_free``: that many developers write
    messages that name neither the feature nor the function (signals that a message-only method
    cannot use); ``spread`` = chance a growth commit puts its new function (and its test) in one
    of the shared modules ``pkg/common.py`` / ``pkg/helpers.py`` (tests in
    ``tests/test_common.py``) instead of the feature's own module, so that the files a commit
    touches no longer name its feature and only the symbols it uses (``<topic>_fn0``), its message
    and its time do. The defaults reproduce the earlier generator exactly.
    """
    if not 0.0 <= spread <= 1.0:
        raise ValueError(f"spread must be in [0, 1]; got {spread}")
    if topic_free < 0 or topic_free > len(DEVS):
        raise ValueError(f"topic_free must be in [0, {len(DEVS)}]; got {topic_free}")
    if refactors < 1:
        raise ValueError(f"refactors must be >= 1; got {refactors}")
    if not 2 <= n_features <= len(TOPICS):
        raise ValueError(f"n_features must be in [2, {len(TOPICS)}]; got {n_features}")
    rng = np.random.default_rng(seed)
    topics = [str(t) for t in rng.permutation(list(TOPICS))[:n_features]]
    w = _Writer(Path(path))
    truth = RepoTruth(Path(path), topics)
    n_noise = max(2, int(round(noise * n_commits)))
    per = np.full(n_features, max(2, (n_commits - n_noise) // n_features))
    per[: max(0, (n_commits - n_noise) - int(per.sum()))] += 1
    deps = {
        k: (int(rng.integers(k)) if k > 0 and rng.random() < 0.6 else None)
        for k in range(n_features)
    }
    weak = {
        k: (int(rng.integers(k)) if k > 1 and rng.random() < 0.4 else None)
        for k in range(n_features)
    }
    owner = {k: int(rng.integers(len(DEVS))) for k in range(n_features)}
    style = {d: STYLES[int(rng.integers(len(STYLES)))] for d in range(len(DEVS))}
    if topic_free:
        for d in rng.permutation(len(DEVS))[:topic_free]:
            style[int(d)] = "topicfree"
    # schedule: feature k works in a window starting at 10h*k; a late fix goes 200h later
    events = []
    for k in range(n_features):
        t = 36_000 * k + int(rng.integers(0, 3600))
        for step in range(int(per[k])):
            late = step == per[k] - 1 and per[k] >= 3
            events.append((t + (720_000 if late else 0), k, step))
            t += int(rng.exponential(9_000)) + 600
    horizon = max(e[0] for e in events)
    kinds = ["typo", "format", "bot", "revert"]
    noise_events, i = [], 0
    while len(noise_events) < n_noise:
        kind = kinds[i % 4] if n_noise >= 4 else kinds[i % 2 * 3]
        noise_events.append((int(rng.integers(40_000, horizon)), -1, kind))
        i += 1
    if refactor and n_features >= 3:
        for r in range(refactors):
            at = 36_000 * (n_features * (r + 1) // (refactors + 1)) + 1800
            noise_events.append((at, -1, "refactor" if r == 0 else f"refactor{r}"))
    base = 1_700_000_000
    w.files["pkg/__init__.py"] = ['"""A generated package."""']
    w.files["README.md"] = ["# pkg", "", "Teh package does things.", "Recieve and proces data."]
    w.files["requirements.txt"] = ["requests==2.30.0"]
    w.files["tests/__init__.py"] = [""]
    w.files["pkg/cli.py"] = ["COMMANDS = []"]
    w.commit("Initial commit", DEVS[0], base)
    created: set[int] = set()
    debug_pending: list[tuple[int, str]] = []
    ops = sorted(events + noise_events, key=lambda e: (e[0], e[1]))
    for t, k, step in ops:
        when = base + 3600 + t
        if k < 0:
            sha = _noise(w, rng, step, created, topics, when, debug_pending, truth)
            continue
        topic, mod = topics[k], f"pkg/{topics[k]}.py"
        dev = owner[k] if rng.random() < 0.8 else int(rng.integers(len(DEVS)))
        tests = f"tests/test_{topic}.py"
        if step == 0:
            lines = [f"# {topic} module: {TOPICS[topic][0]}", ""]
            test = [f"from pkg.{topic} import {topic}_fn0", ""]
            if deps[k] is not None:
                d = topics[deps[k]]
                lines = [
                    f"# {topic} module: {TOPICS[topic][0]}",
                    f"from pkg.{d} import {d}_fn0",
                    "",
                ]
                lines += [f"def {topic}_fn0(x):", f"    return {d}_fn0(x) + {k}", ""]
                truth.edges[(deps[k], k)] = "Strong"
            else:
                lines += [f"def {topic}_fn0(x):", f"    return x + {k}", ""]
            test += [f"def test_{topic}_fn0():", f"    assert {topic}_fn0(0) == {topic}_fn0(0)", ""]
            w.files[mod], w.files[tests] = lines, test
            w.files["pkg/__init__.py"].append(f"from pkg.{topic} import {topic}_fn0  # noqa")
            kind, detail = "new", f"{topic}_fn0"
            created.add(k)
        elif step == per[k] - 1 and per[k] >= 3:  # late bug fix with a test
            lines = w.files[mod]
            idx = max(i for i, ln in enumerate(lines) if ln.startswith("    return"))
            lines[idx] = lines[idx] + " - 0"
            w.files[tests] += [
                f"def test_{topic}_regression_{step}():",
                f"    assert {topic}_fn0(1) is not None",
                "",
            ]
            kind, detail = "fix", "off-by-one regression"
        elif step == 1 and weak[k] is not None and weak[k] in created and weak[k] != deps[k]:
            other = f"pkg/{topics[weak[k]]}.py"
            olines = w.files[other]
            idx = next(i for i, ln in enumerate(olines) if ln.startswith("    return"))
            olines[idx] = olines[idx] + " + 0"
            w.files[mod] += [f"def {topic}_fn{step}(x):", f"    return {topic}_fn0(x) - {step}", ""]
            truth.edges[(weak[k], k)] = "Weak"
            kind, detail = "touch", f"cross-reference {topics[weak[k]]}"
        else:
            body = [
                f"def {topic}_fn{step}(x):",
                f"    return {topic}_fn0(x) * {step + 1}",
                "",
            ]
            # spread: the function lands in a shared module; drawn only when spread > 0 so that
            # the defaults keep the earlier generator's random stream
            home = None
            if spread and rng.random() < spread:
                home = SHARED[int(rng.integers(len(SHARED)))]
            if home is None:
                w.files[mod] += body
            else:
                name = home[len("pkg/") : -len(".py")]
                w.files.setdefault(home, [f"# shared {name} module", ""])
                w.files[home] += [f"from pkg.{topic} import {topic}_fn0  # noqa: E402", ""] + body
            if rng.random() < 0.7:
                check = [
                    f"def test_{topic}_fn{step}():",
                    f"    assert {topic}_fn{step}(0) == {topic}_fn0(0) * {step + 1}",
                    "",
                ]
                if home is None:
                    w.files[tests][0] += f", {topic}_fn{step}"
                    w.files[tests] += check
                else:
                    shared_tests = w.files.setdefault("tests/test_common.py", [""])
                    shared_tests += [
                        f"from pkg.{name} import {topic}_fn{step}, {topic}_fn0  # noqa: E402",
                        "",
                    ] + check
            if rng.random() < shared:  # shared registry file: co-change across features
                w.files["pkg/cli.py"].append(f"COMMANDS.append('{topic}_fn{step}')")
            others = [j for j in created if j != k]
            if others and rng.random() < mixed:  # mixed commit: also appends to another module
                o = f"pkg/{topics[others[int(rng.integers(len(others)))]]}.py"
                w.files[o].append(f"{topic.upper()}_HOOK_{step} = '{topic}_fn{step}'")
            kind, detail = "grow", f"{topic}_fn{step}"
        sha = w.commit(_msg(rng, topic, style[dev], kind, detail), DEVS[dev], when)
        truth.label[sha] = k
    return truth


def _noise(w, rng, kind, created, topics, when, debug_pending, truth) -> str | None:
    dev = DEVS[int(rng.integers(len(DEVS)))]
    live = sorted(created)
    if kind == "typo":
        readme = w.files["README.md"]
        readme.append(f"Fixed wording {len(readme)}.")
        sha = w.commit(
            str(rng.choice(["Fix typo", "docs: fix typos in README", "typo"])), dev, when
        )
        truth.label[sha] = -1
        return sha
    if kind == "bot":
        w.files["requirements.txt"] = [f"requests==2.{31 + len(truth.dropped)}.0"]
        sha = w.commit("Bump requests", ("dependabot[bot]", "support@github.com"), when)
        truth.dropped[sha] = "bot"
        return sha
    if not live:
        return None
    mod = f"pkg/{topics[live[int(rng.integers(len(live)))]]}.py"
    if kind.startswith("refactor") and kind != "refactor":  # a later pass: a review marker
        for j in live:
            w.files[f"pkg/{topics[j]}.py"].insert(1, f"REVIEWED_{kind[8:]} = True")
        sha = w.commit(f"refactor: review pass {kind[8:]} over all modules", dev, when)
        truth.label[sha] = -1
        return sha
    if kind == "refactor":
        for j in live:
            lines = w.files[f"pkg/{topics[j]}.py"]
            i = next(i for i, ln in enumerate(lines) if ln.startswith(f"def {topics[j]}_fn0(x)"))
            lines[i] = lines[i].replace("(x)", "(x: int)")
        sha = w.commit("refactor: add type hints to entry points", dev, when)
        truth.label[sha] = -1
        return sha
    if kind == "format":
        lines = w.files[mod]
        w.files[mod] = [
            ln.replace("return ", "return (") + ")"
            if ln.startswith("    return ") and not ln.rstrip().endswith(")")
            else ln
            for ln in lines
        ]
        if w.files[mod] == lines:
            w.files[mod] = lines + [""]
        sha = w.commit("style: run formatter", dev, when)
        truth.dropped[sha] = "formatting-only"
        return sha
    # revert pair: add a debug flag, revert it in the next commit
    w.files[mod].insert(1, "DEBUG_TRACE = True")
    sha = w.commit("Enable trace output", dev, when)
    w.files[mod].pop(1)
    sha2 = w.commit(f'Revert "Enable trace output"\n\nThis reverts commit {sha}.', dev, when + 60)
    truth.dropped[sha], truth.dropped[sha2] = "reverted", "revert"
    return sha2
