"""An LLM command agent for EvoClaw trials, and behaviour SRSes written from a milestone's diff.

:class:`LLMAgent` is an agent callable for :func:`icml26.deepcommit.harness.run_trial`
(``(workdir, task) -> bool``) driven by any :class:`icml26.core.chat.ChatModel`: a local zoo
model through ``core.generate`` (``LocalChat("qwen2.5-coder-0.5b-instruct")``) or an
OpenAI-compatible endpoint (``OpenAIChat``/``get_chat("http://host/v1#model")``). One turn per
milestone: the prompt holds the SRS (headings made plain text), then the current text of the
source files it names; the reply gives each changed file (whole, or only its new and changed top-level definitions)::

    ### pkg/cache.py
    ```python
    def cache_fn2(x):
        return cache_fn0(x) * 3
    ```

Each block is parsed with :mod:`ast` and merged into its file by name: a function, class or
assigned name that exists is replaced in place, a new one is appended, an import that is not there
yet goes after the file's last top-level import. Paths must be relative ``.py`` files inside the
workspace (never ``.git``); a block that does not parse, or names a bad path, is skipped and
logged. A reply with one fenced block and no path, to a task that names one source file, is
that file. No valid block = the agent gave up on the milestone (the harness retries it next round);
a valid block already in place is a submission of the tree as it is.
[ours]: the one-turn format and the merge by name are our choices for models of 0.5-1.5B
parameters (a copied-back file merges to itself; a reply that drops a definition does not delete
it); EvoClaw's agents are multi-turn tool users.

:func:`behaviour_srs` writes the "required behaviour" of a milestone from its gold source diff
(tests excluded), as EvoClaw's SRSes are written from the milestone's diff: a function whose body
is one ``return`` becomes "``f(x)`` returns ``EXPR``"; any other new or changed definition is
quoted; removed definitions are listed. The hidden tests are never shown.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from icml26.core.io import atomic_write_text

__all__ = ["LLMAgent", "apply_blocks", "parse_blocks", "behaviour_srs", "definitions"]

SYSTEM = (
    "You are a careful Python developer editing a small repository. You implement exactly the "
    "required behaviour. For every file you change, write a line `### <path>` and then a "
    "```python code block with the complete new content of that file. No explanations, no "
    "tests.\n\nExample task: in `pkg/util.py`, `double(x)` returns `x * 2`.\nExample answer:\n"
    "### pkg/util.py\n```python\ndef double(x):\n    return x * 2\n```"
)
_BLOCK = re.compile(
    r"^#{2,4}\s*`?(?P<path>[\w./-]+\.py)`?\s*\n+```(?:python|py)?[ \t]*\n(?P<code>.*?)^```",
    re.M | re.S,
)
# the same, with the path as the first line of the fence: ```python\n# pkg/a.py\n...```
_BLOCK_COMMENT = re.compile(
    r"^```(?:python|py)?[ \t]*\n#\s*`?(?P<path>[\w./-]+\.py)`?[ \t]*\n(?P<code>.*?)^```",
    re.M | re.S,
)
_OPEN_BLOCK = re.compile(
    r"^#{2,4}\s*`?(?P<path>[\w./-]+\.py)`?\s*\n+```(?:python|py)?[ \t]*\n(?P<code>(?:(?!^```).)*)\Z",
    re.M | re.S,
)
_FENCE = re.compile(r"^```(?:python|py)?[ \t]*\n(.*?)^```", re.M | re.S)
_PATH_IN_TEXT = re.compile(r"`?((?:[\w-]+/)*[\w-]+\.py)`?")


def _parsable_prefix(code: str) -> str:
    """The longest line prefix of ``code`` that parses (a reply cut by the token budget)."""
    lines = code.splitlines()
    for n in range(len(lines), 0, -1):
        text = "\n".join(lines[:n]).rstrip() + "\n"
        try:
            ast.parse(text)
        except SyntaxError:
            continue
        return text if text.strip() else ""
    return ""


def parse_blocks(reply: str) -> list[tuple[str, str]]:
    """``(path, code)`` for every ``### path`` header followed by a fenced code block, or (when
    there is none) every fenced block whose first line is a ``# path.py`` comment. A last block
    left open (the reply ran out of tokens) keeps its longest prefix that parses."""
    found = [(m["path"].lstrip("./"), m["code"]) for m in _BLOCK.finditer(reply)]
    if not found:
        found = [(m["path"].lstrip("./"), m["code"]) for m in _BLOCK_COMMENT.finditer(reply)]
    ends = [m.end() for m in _BLOCK.finditer(reply)]
    tail = reply[ends[-1] if ends else 0 :]
    m = _OPEN_BLOCK.search(tail)
    if m and (found or not ends) and (code := _parsable_prefix(m["code"])):
        found.append((m["path"].lstrip("./"), code))
    return found


def _key(node: ast.stmt) -> tuple:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return ("def", node.name)
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = tuple(sorted(t.id for t in targets if isinstance(t, ast.Name)))
        return ("assign", names) if names else ("stmt", ast.dump(node))
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return ("import", ast.dump(node))
    return ("stmt", ast.dump(node))  # any other statement (a call, an if block): by content


def definitions(source: str) -> dict[tuple, str]:
    """Top-level definitions of ``source`` by key (see :func:`_key`) -> their source text."""
    tree = ast.parse(source)
    lines = source.splitlines()
    out = {}
    for node in tree.body:
        k = _key(node)
        if k is not None:
            out[k] = "\n".join(lines[node.lineno - 1 : node.end_lineno])
    return out


def _merge(old: str, code: str) -> str:
    """``old`` with the top-level statements of ``code`` merged in by name (see module doc)."""
    new_tree = ast.parse(code)
    new_lines = code.splitlines()
    lines = old.splitlines()
    for node in new_tree.body:
        seg = new_lines[node.lineno - 1 : node.end_lineno]
        if getattr(node, "decorator_list", None):
            seg = new_lines[node.decorator_list[0].lineno - 1 : node.end_lineno]
        k = _key(node)
        try:
            old_tree = ast.parse("\n".join(lines))
        except SyntaxError:
            old_tree = ast.Module(body=[], type_ignores=[])
        spots = {}
        last_import = 0
        for o in old_tree.body:
            ok = _key(o)
            if ok is not None and ok not in spots:
                start = (
                    o.decorator_list[0].lineno if getattr(o, "decorator_list", None) else o.lineno
                )
                spots[ok] = (start, o.end_lineno)
            if isinstance(o, (ast.Import, ast.ImportFrom)):
                last_import = o.end_lineno
        if k is not None and k in spots:
            if k[0] in ("import", "stmt"):
                continue  # already there
            a, b = spots[k]
            lines[a - 1 : b] = seg
        elif k is not None and k[0] == "import":
            lines[last_import:last_import] = seg
        else:
            while lines and not lines[-1].strip():
                lines.pop()
            lines += (["", ""] if lines else []) + seg
    return "\n".join(lines).rstrip("\n") + "\n"


def _named_sources(srs: str) -> list[str]:
    """The ``.py`` paths an SRS names, in order, without test files."""
    return [p for p in dict.fromkeys(_PATH_IN_TEXT.findall(srs)) if not p.startswith("tests/")]


def _safe_path(workdir: Path, rel: str) -> Path | None:
    p = Path(rel)
    if p.is_absolute() or ".." in p.parts or not p.parts or p.parts[0] == ".git":
        return None
    if p.suffix != ".py":
        return None
    return workdir / p


def apply_blocks(workdir: Path | str, blocks: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """Merge each ``(path, code)`` block into ``workdir``; returns (files changed, problems): a
    block that is valid but already in place changes nothing and is no problem."""
    workdir = Path(workdir)
    changed, problems = [], []
    for rel, code in blocks:
        dst = _safe_path(workdir, rel)
        if dst is None:
            problems.append(f"{rel}: not a relative .py path inside the workspace; skipped")
            continue
        try:
            ast.parse(code)
        except SyntaxError as exc:
            problems.append(
                f"{rel}: the block does not parse ({exc.msg}, line {exc.lineno}); skipped"
            )
            continue
        old = dst.read_text() if dst.exists() else ""
        new = _merge(old, code)
        if new != old:
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_text(new)
            changed.append(rel)
    return changed, problems


@dataclass
class LLMAgent:
    """One-turn LLM agent for :func:`~icml26.deepcommit.harness.run_trial` (module docstring).

    Args:
        chat: a :class:`icml26.core.chat.ChatModel`.
        max_new_tokens: reply budget per milestone.
        temperature: sampling temperature (0 = greedy).
        seed: sampling seed; a call draws with ``seed``, the milestone's name and the attempt.
        max_file_lines: lines of each shown file (longer files are cut, with a note).
        log_dir: when set, ``<milestone>.json`` (prompt, reply, files changed, problems).
        name: the model's name in ``repr`` (a resumable run's key).
    """

    chat: object
    max_new_tokens: int = 512
    temperature: float = 0.0
    seed: int = 0
    max_file_lines: int = 120
    log_dir: Path | str | None = None
    calls: int = 0
    attempts: dict = field(default_factory=dict)
    name: str = ""

    def __repr__(self) -> str:  # stable across calls: the runner's resume key
        return (f"LLMAgent({self.name or type(self.chat).__name__}, tokens={self.max_new_tokens}, "
                f"temperature={self.temperature}, seed={self.seed})")

    def prompt(self, workdir: Path, srs: str) -> str:
        parts = []
        for rel in _named_sources(srs):
            p = _safe_path(workdir, rel)
            if p is None:
                continue
            if p.exists():
                lines = p.read_text().splitlines()
                cut = len(lines) > self.max_file_lines
                body = "\n".join(lines[: self.max_file_lines]) + ("\n# ... (cut)" if cut else "")
                parts.append(f"### {rel}\n```python\n{body}\n```")
            else:
                parts.append(f"### {rel}\n(this file does not exist yet)")
        files = "\n\n".join(parts) if parts else "(no source files named)"
        task = re.sub(r"^#+\s*", "", srs.strip(), flags=re.M)  # headings read as file content
        return (
            f"TASK\n\n{task}\n\nCURRENT FILES\n\n{files}\n\n"
            "Now write the complete new content of every file that must change, each as a line "
            "`### <path>` followed by a ```python code block."
        )

    def __call__(self, workdir: Path, task: dict) -> bool:
        workdir = Path(workdir)
        user = self.prompt(workdir, task["srs"])
        m = str(task["milestone"])
        k = self.attempts[m] = self.attempts.get(m, 0) + 1  # a retry draws anew
        seed = (self.seed * 1_000_003 + sum(ord(c) * 31**i for i, c in enumerate(m)) + 7919 * k) % (
            2**31
        )
        reply = self.chat.chat(
            [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            seed=seed,
        )
        self.calls += 1
        blocks = parse_blocks(reply)
        named = _named_sources(task["srs"])
        if not blocks and len(named) == 1:  # one unnamed block and one file the task names
            blocks = [(named[0], m[1]) for m in _FENCE.finditer(reply)][:1]
        changed, problems = apply_blocks(workdir, blocks)
        rec = {
            "milestone": m,
            "prompt": user,
            "reply": reply,
            "changed": changed,
            "problems": problems,
            "blocks": len(blocks),
        }
        if self.log_dir is not None:
            name = f"{m}.json" if k == 1 else f"{m}.try{k}.json"
            atomic_write_text(Path(self.log_dir) / name, json.dumps(rec, indent=1))
        return len(problems) < len(blocks)  # at least one valid block: submitted


def _describe_def(key: tuple, text: str) -> str:
    kind, name = key
    if kind == "def":
        try:
            node = ast.parse(text).body[0]
        except SyntaxError:
            node = None
        if (
            isinstance(node, ast.FunctionDef)
            and len(node.body) == 1
            and isinstance(node.body[0], ast.Return)
            and node.body[0].value is not None
            and not node.decorator_list
        ):
            args = ast.unparse(node.args)
            return f"`{node.name}({args})` returns `{ast.unparse(node.body[0].value)}`."
        return f"define `{name}` as follows:\n\n```python\n{text}\n```"
    if kind == "assign":
        return f"set `{text.strip()}`."
    return f"add `{text.strip()}`."


def behaviour_srs(files_before: dict[str, str], files_after: dict[str, str]) -> str:
    """The "Required behaviour" section of a milestone from its source files before and after
    (path -> text; test files left out by the caller). One bullet per new, changed or removed
    top-level definition, in file order; files that do not parse are quoted whole."""
    out = []
    for path in sorted(set(files_before) | set(files_after)):
        a, b = files_before.get(path), files_after.get(path)
        if a == b:
            continue
        try:
            da = definitions(a) if a is not None else {}
            db = definitions(b) if b is not None else {}
        except SyntaxError:
            out.append(f"- `{path}` becomes:\n\n```python\n{b or ''}\n```")
            continue
        if b is None:
            out.append(f"- delete `{path}`.")
            continue
        for k, text in db.items():
            if da.get(k) == text:
                continue
            verb = "In" if a is not None else "New file"
            out.append(f"- {verb} `{path}`: {_describe_def(k, text)}")
        for k in da:
            if k in db:
                continue
            what = k[1] if k[0] == "def" else ", ".join(k[1]) if k[0] == "assign" else da[k].strip()
            out.append(f"- In `{path}`: remove `{what}`.")
    return "\n".join(out)


def milestone_srs(
    repo: Path | str,
    start: str,
    end: str,
    title: str,
    subjects: list[str] | None = None,
    test_dirs: tuple[str, ...] = ("tests",),
) -> str:
    """An SRS for the milestone ``start..end`` of ``repo``: title, the commit subjects (when
    given), the behaviour from the gold source diff (:func:`behaviour_srs`; tests excluded) and
    the source files involved. This is what :class:`LLMAgent` is handed in the claim."""
    from icml26.deepcommit.harness import _show
    from icml26.deepcommit.history import git

    excl = [f":(exclude){d}" for d in test_dirs]
    files = git(repo, "diff", "--name-only", start, end, "--", ".", *excl).split()
    before = {f: t for f in files if (t := _show(Path(repo), start, f)) is not None}
    after = {f: t for f in files if (t := _show(Path(repo), end, f)) is not None}
    lines = [f"# {title}", ""]
    if subjects:
        lines += ["## Requested changes", ""] + [f"- {s}" for s in subjects] + [""]
    lines += ["## Required behaviour", "", behaviour_srs(before, after) or "(no source change)", ""]
    lines += ["## Source files involved", ""] + [f"- `{f}`" for f in files]
    return "\n".join(lines) + "\n"
