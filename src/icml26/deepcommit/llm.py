"""The optional LLM pass of DeepCommit (off by default): names, SRS text, merge and split.

The paper's DeepCommit is an LLM agent that reads the history and forms the milestones. Here the
clustering of :mod:`milestones` proposes them and an LLM (any :class:`icml26.core.chat.ChatModel`:
``LocalChat`` SmolLM2, an OpenAI-compatible endpoint, or ``StubChat`` in tests) revises them with
three narrow questions whose answers are parsed strictly (an unparsable answer changes nothing
and is logged):

1. **split** (milestones of >= ``split_min`` commits): for each commit, "does it belong to the
   goal of the others?"; commits answered NO leave together as one new milestone (if at least one
   commit stays).
2. **merge** (candidate pairs: milestones that share a touched file or where one uses a symbol
   the other defines, at most ``max_merge_pairs``, most shared files first): "are these one
   development goal?"; YES merges them (union-find).
3. **name + SRS** per final milestone: a one-line title and a short requirements description,
   prepended to the deterministic SRS (requested changes and files).

Labels are renumbered in order of each milestone's first commit, like :func:`milestones.group`.
The DAG is built afterwards from the revised labels. [ours]: the questions, the candidate rule
and the parsing are our design; the paper's prompts are not published.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from icml26.deepcommit.history import Commit

__all__ = ["LLMPass", "llm_pass"]

_SYSTEM = (
    "You are a senior software engineer reading a project's git history. Answer briefly and "
    "exactly in the format asked."
)


@dataclass
class LLMPass:
    labels: list[int]
    titles: dict[int, str] = field(default_factory=dict)
    srs: dict[int, str] = field(default_factory=dict)
    merges: list[tuple[int, int]] = field(default_factory=list)  # (a, b) in pre-merge ids
    splits: list[tuple[int, list[str]]] = field(default_factory=list)  # (milestone, shas moved)
    log: list[str] = field(default_factory=list)
    calls: int = 0


def _describe(commits: list[Commit], max_commits: int = 12, max_files: int = 8) -> str:
    lines = []
    for c in commits[:max_commits]:
        files = ", ".join(c.files[:max_files]) + (" ..." if len(c.files) > max_files else "")
        lines.append(f"- {c.subject[:120]} (files: {files})")
    if len(commits) > max_commits:
        lines.append(f"- ... and {len(commits) - max_commits} more commits")
    return "\n".join(lines)


def _yes_no(text: str) -> bool | None:
    m = re.match(r"\W*(yes|no)\b", text.strip(), re.I)
    return None if m is None else m[1].lower() == "yes"


def _renumber(labels: list[int]) -> list[int]:
    order: dict[int, int] = {}
    return [order.setdefault(x, len(order)) for x in labels]


def llm_pass(
    commits: list[Commit],
    labels,
    chat,
    merge: bool = True,
    split: bool = True,
    split_min: int = 3,
    max_merge_pairs: int = 20,
    max_new_tokens: int = 160,
    progress=None,
) -> LLMPass:
    """Revise ``labels`` (one per commit) with ``chat``; see the module docstring."""
    labels = [int(x) for x in labels]
    out = LLMPass(labels)

    def ask(prompt: str, n: int = max_new_tokens) -> str:
        out.calls += 1
        return chat.chat(
            [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": prompt}],
            max_new_tokens=n,
            temperature=0.0,
        )

    def groups() -> dict[int, list[int]]:
        g: dict[int, list[int]] = {}
        for i, m in enumerate(labels):
            g.setdefault(m, []).append(i)
        return g

    # 1. split
    if split:
        nxt = max(labels, default=-1) + 1
        for m, idx in sorted(groups().items()):
            if len(idx) < split_min:
                continue
            moved = []
            for i in idx:
                others = [commits[j] for j in idx if j != i]
                ans = ask(
                    "These commits were grouped as one development goal:\n"
                    f"{_describe(others)}\n\nDoes this commit belong to the same goal?\n"
                    f"{_describe([commits[i]])}\n\nAnswer YES or NO.",
                    4,
                )
                yn = _yes_no(ans)
                if yn is None:
                    out.log.append(f"split {m}: unparsable answer {ans[:60]!r}; kept")
                elif not yn:
                    moved.append(i)
            if moved and len(moved) < len(idx):
                for i in moved:
                    labels[i] = nxt
                out.splits.append((m, [commits[i].sha for i in moved]))
                nxt += 1
    # 2. merge
    if merge:
        g = groups()
        files = {m: {f for i in idx for f in commits[i].files} for m, idx in g.items()}
        defs = {m: {s for i in idx for s in commits[i].defines} for m, idx in g.items()}
        uses = {m: {s for i in idx for s in commits[i].uses} for m, idx in g.items()}
        ms = sorted(g)
        cand = []
        for x, a in enumerate(ms):
            for b in ms[x + 1 :]:
                shared = len(files[a] & files[b])
                if shared or defs[a] & uses[b] or defs[b] & uses[a]:
                    cand.append((-shared, a, b))
        parent = {m: m for m in ms}

        def find(m: int) -> int:
            while parent[m] != m:
                parent[m] = parent[parent[m]]
                m = parent[m]
            return m

        for _, a, b in sorted(cand)[:max_merge_pairs]:
            if find(a) == find(b):
                continue
            ans = ask(
                f"Milestone A:\n{_describe([commits[i] for i in g[a]])}\n\n"
                f"Milestone B:\n{_describe([commits[i] for i in g[b]])}\n\n"
                "Do A and B implement one and the same development goal (one feature or fix)? "
                "Answer YES or NO.",
                4,
            )
            yn = _yes_no(ans)
            if yn is None:
                out.log.append(f"merge {a}+{b}: unparsable answer {ans[:60]!r}; kept apart")
            elif yn:
                parent[find(b)] = find(a)
                out.merges.append((a, b))
        labels = [find(m) for m in labels]
    labels = _renumber(labels)
    out.labels = labels
    # 3. names + SRS
    g = groups()
    it = progress.track(sorted(g), len(g), "LLM names/SRS") if progress else sorted(g)
    for m in it:
        ans = ask(
            "A group of commits implements one development goal:\n"
            f"{_describe([commits[i] for i in g[m]])}\n\n"
            "Write a short title for the goal on the first line, then 2-4 sentences describing "
            "the required behaviour, as a requirements document for a developer who must "
            "implement it from scratch."
        )
        lines = [ln.strip() for ln in ans.strip().splitlines() if ln.strip()] or [""]
        title = re.sub(r"^(#+\s*|title\s*:\s*|\*\*)", "", lines[0], flags=re.I).strip(" *#")
        # a title line (not a lead-in such as "The goal:") and a description
        if len(lines) >= 2 and 3 <= len(title) <= 120 and not title.endswith(":"):
            out.titles[m] = title
            out.srs[m] = "\n".join(lines[1:]).strip()
        else:
            out.log.append(f"name {m}: unusable answer {ans[:60]!r}; commit subject kept")
    return out
