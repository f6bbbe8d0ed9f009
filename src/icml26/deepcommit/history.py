"""Commit-history preprocessing (DeepCommit stage 1) through the ``git`` command line.

:func:`load_history` reads the commits of ``rev_range`` of a local repository (oldest first, first
parent history), with their touched files, changed line ranges, Python symbols touched / defined /
used, author and time; then drops merges, bot commits, formatting-only commits (every changed
``.py`` file AST-equal, every other file equal up to whitespace) and exact reverts together with
their targets. Each drop is listed with its reason. Partial reverts are kept ([ours]).
"""

from __future__ import annotations

import ast
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from icml26.core.errors import UserError

__all__ = ["Commit", "Dropped", "History", "git", "load_history", "BOT_PATTERN"]

#: author name/email patterns of automation accounts
BOT_PATTERN = re.compile(r"\[bot\]|dependabot|renovate|github-actions|(^|[-_.])bot@", re.I)
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def git(repo: Path | str, *args: str, check: bool = True, input: str | None = None) -> str:
    """Run ``git -C repo args`` and return stdout; a failure raises UserError with git's message."""
    proc = subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        input=input,
        errors="replace",
    )
    if check and proc.returncode != 0:
        raise UserError(f"git {' '.join(args)} failed in {repo}: {proc.stderr.strip()}")
    return proc.stdout


@dataclass(frozen=True)
class FileChange:
    """One file of a commit: ``old_ranges`` / ``new_ranges`` are (start, count) line ranges of the
    zero-context diff; ``added``/``removed`` the changed lines' text."""

    path: str
    old_ranges: tuple[tuple[int, int], ...]
    new_ranges: tuple[tuple[int, int], ...]
    added: tuple[str, ...]
    removed: tuple[str, ...]


@dataclass
class Commit:
    """One commit. ``time`` is the author time (Unix seconds); symbols are ``module.name``."""

    sha: str
    parents: tuple[str, ...]
    author: str
    email: str
    time: int
    message: str
    changes: tuple[FileChange, ...] = ()
    touched: frozenset[str] = frozenset()  # symbols whose definition spans changed lines
    defines: frozenset[str] = frozenset()  # top-level symbols added by this commit
    uses: frozenset[str] = frozenset()  # symbols of other modules referenced by added lines

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(c.path for c in self.changes)

    @property
    def subject(self) -> str:
        return self.message.splitlines()[0] if self.message else ""


@dataclass(frozen=True)
class Dropped:
    sha: str
    reason: str  # "merge" | "bot" | "formatting-only" | "revert of X" | "reverted by X" | "empty"


@dataclass
class History:
    repo: Path
    rev_range: str
    commits: list[Commit]  # kept, oldest first
    dropped: list[Dropped] = field(default_factory=list)


class _Blobs:
    """File contents at revisions through one ``git cat-file --batch`` process."""

    def __init__(self, repo: Path):
        self.proc = subprocess.Popen(
            ["git", "-C", str(repo), "cat-file", "--batch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def get(self, rev: str, path: str) -> str | None:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(f"{rev}:{path}\n".encode())
        self.proc.stdin.flush()
        header = self.proc.stdout.readline().decode().split()
        if len(header) < 3 or header[1] == "missing":
            return None
        data = self.proc.stdout.read(int(header[2]) + 1)[:-1]
        return data.decode("utf-8", errors="replace")

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait()


def _module(path: str) -> str:
    return path[:-3].replace("/", ".").removesuffix(".__init__") if path.endswith(".py") else path


def _defs(src: str | None) -> dict[str, tuple[int, int]]:
    """Top-level function/class names -> (first line, last line); {} when unparsable."""
    if not src:
        return {}
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return {}
    out = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign)):
            names = (
                [node.name]
                if hasattr(node, "name")
                else [t.id for t in node.targets if isinstance(t, ast.Name)]
            )  # type: ignore[attr-defined]
            for name in names:
                out[name] = (node.lineno, node.end_lineno or node.lineno)
    return out


def _imports(src: str | None, module: str) -> dict[str, str]:
    """Local name -> qualified ``module.name`` for ``from X import name`` (relative resolved)."""
    out: dict[str, str] = {}
    if not src:
        return out
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return out
    pkg = module.split(".")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg[: len(pkg) - node.level] + ([base] if base else []))
            for alias in node.names:
                out[alias.asname or alias.name] = f"{base}.{alias.name}"
    return out


def _same_format(old: str | None, new: str | None, path: str) -> bool:
    if old is None or new is None:
        return False
    if path.endswith(".py"):
        try:
            return ast.dump(ast.parse(old)) == ast.dump(ast.parse(new))
        except SyntaxError:
            return False
    return "".join(old.split()) == "".join(new.split())


def _parse_diff(text: str) -> list[FileChange]:
    changes, path, old_r, new_r, add, rem = [], None, [], [], [], []

    def flush():
        if path is not None:
            changes.append(FileChange(path, tuple(old_r), tuple(new_r), tuple(add), tuple(rem)))

    old_path = None
    for line in text.splitlines():
        if line.startswith("diff --git "):
            flush()
            path, old_path, old_r, new_r, add, rem = None, None, [], [], [], []
        elif line.startswith("--- "):
            old_path = None if line[4:] == "/dev/null" else line[6:]
        elif line.startswith("+++ "):
            path = old_path if line[4:] == "/dev/null" else line[6:]
        elif m := _HUNK.match(line):
            old_r.append((int(m[1]), int(m[2]) if m[2] is not None else 1))
            new_r.append((int(m[3]), int(m[4]) if m[4] is not None else 1))
        elif path is not None and line.startswith("+"):
            add.append(line[1:])
        elif path is not None and line.startswith("-"):
            rem.append(line[1:])
    flush()
    return changes


def _symbols(commit: Commit, blobs: _Blobs) -> None:
    touched, defines, uses = set(), set(), set()
    parent = commit.parents[0] if commit.parents else None
    for ch in commit.changes:
        if not ch.path.endswith(".py"):
            continue
        mod = _module(ch.path)
        new_src = blobs.get(commit.sha, ch.path)
        old_src = blobs.get(parent, ch.path) if parent else None
        new_defs, old_defs = _defs(new_src), _defs(old_src)
        for name in new_defs.keys() - old_defs.keys():
            defines.add(f"{mod}.{name}")
        for defs, ranges in ((new_defs, ch.new_ranges), (old_defs, ch.old_ranges)):
            for name, (a, b) in defs.items():
                if any(s <= b and a <= s + max(n, 1) - 1 for s, n in ranges):
                    touched.add(f"{mod}.{name}")
        imports = _imports(new_src, mod)
        before = {i for line in ch.removed for i in _IDENT.findall(line)}
        for line in ch.added:  # names newly referenced (not merely on a rewritten line)
            for ident in set(_IDENT.findall(line)) - before:
                if ident in imports and not imports[ident].startswith(mod + "."):
                    uses.add(imports[ident])
    commit.touched, commit.defines, commit.uses = map(frozenset, (touched, defines, uses))


def _check_repo(repo: Path, rev_range: str) -> None:
    if not repo.is_dir() or git(repo, "rev-parse", "--git-dir", check=False).strip() == "":
        raise UserError(f"{repo} is not a git repository")
    if git(repo, "rev-parse", "--is-shallow-repository").strip() == "true":
        raise UserError(f"{repo} is a shallow clone; run `git fetch --unshallow` first")
    if (repo / ".gitmodules").exists():
        raise UserError(f"{repo} has submodules (.gitmodules), which are not supported")
    attrs = repo / ".gitattributes"
    if attrs.exists() and "filter=lfs" in attrs.read_text(errors="replace"):
        raise UserError(f"{repo} uses Git LFS (.gitattributes filter=lfs), which is not supported")
    for rev in [r for r in re.split(r"\.\.\.?", rev_range) if r]:
        if git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False) == "":
            raise UserError(f"unknown revision {rev!r} in range {rev_range!r} of {repo}")


def load_history(repo: Path | str, rev_range: str = "HEAD") -> History:
    """Commits of ``rev_range`` (e.g. ``v1..v2``; ``HEAD`` = all), oldest first, preprocessed.

    Raises UserError for a non-repository, unknown revision, shallow clone, submodules or LFS.
    """
    repo = Path(repo)
    _check_repo(repo, rev_range)
    sep, end = "\x1f", "\x1e"
    log = git(
        repo,
        "log",
        "--first-parent",
        "--reverse",
        "--no-color",
        f"--format=%H{sep}%P{sep}%an{sep}%ae{sep}%at{sep}%B{end}",
        rev_range,
    )
    raw = []
    for rec in log.split(end):
        rec = rec.strip("\n")
        if not rec:
            continue
        sha, parents, an, ae, at, body = rec.split(sep, 5)
        raw.append(Commit(sha, tuple(parents.split()), an, ae, int(at), body.strip()))
    dropped: list[Dropped] = []
    blobs = _Blobs(repo)
    kept: list[Commit] = []
    try:
        for c in raw:
            if len(c.parents) > 1:
                dropped.append(Dropped(c.sha, "merge"))
                continue
            if BOT_PATTERN.search(f"{c.author} {c.email}"):
                dropped.append(Dropped(c.sha, "bot"))
                continue
            base = c.parents[0] if c.parents else "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
            diff = git(repo, "diff", "--no-color", "--no-renames", "-U0", base, c.sha)
            c.changes = tuple(_parse_diff(diff))
            if not c.changes:
                dropped.append(Dropped(c.sha, "empty"))
                continue
            if c.parents and all(
                _same_format(blobs.get(c.parents[0], ch.path), blobs.get(c.sha, ch.path), ch.path)
                for ch in c.changes
            ):
                dropped.append(Dropped(c.sha, "formatting-only"))
                continue
            _symbols(c, blobs)
            kept.append(c)
    finally:
        blobs.close()
    # exact reverts: every file's added/removed lines are the swapped lines of one earlier commit
    sig = {c.sha: {(ch.path, ch.added, ch.removed) for ch in c.changes} for c in kept}
    inverse = {c.sha: {(ch.path, ch.removed, ch.added) for ch in c.changes} for c in kept}
    gone: dict[str, str] = {}
    for j, b in enumerate(kept):
        for a in reversed(kept[:j]):
            if a.sha not in gone and sig[a.sha] == inverse[b.sha]:
                gone[b.sha] = f"revert of {a.sha[:10]}"
                gone[a.sha] = f"reverted by {b.sha[:10]}"
                break
    dropped += [Dropped(s, r) for s, r in gone.items()]
    kept = [c for c in kept if c.sha not in gone]
    return History(repo, rev_range, kept, dropped)
