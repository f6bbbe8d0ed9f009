"""Milestone dependencies (DeepCommit stage 2, the edges): blame and symbol evidence.

An edge A -> B is proposed when a commit of milestone B

* changes or deletes lines last written by a commit of A (``git blame`` at the commit's parent,
  ignoring the commits preprocessing dropped, so a formatter run does not hide the author), or
* uses (imports and references) a symbol that a commit of A defined.

The edge is **Strong** when B uses A's symbols, else **Weak** ([ours]: the paper's LLM decides;
this rule is our reading of "B needs A to work"). Candidate edges are added strongest evidence
first; one that would close a cycle is a back-edge and is dropped and listed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from icml26.deepcommit.history import History, git

__all__ = ["Dag", "build_dag", "topo_order", "find_cycle"]

_PORCELAIN = re.compile(r"^([0-9a-f]{40}) \d+ \d+")


@dataclass
class Dag:
    """``edges[(a, b)]`` = "Strong" | "Weak"; ``evidence[(a, b)]`` = list of reasons;
    ``back_edges`` = dropped (a, b, reason) tuples."""

    nodes: list[int]
    edges: dict[tuple[int, int], str] = field(default_factory=dict)
    evidence: dict[tuple[int, int], list[str]] = field(default_factory=dict)
    back_edges: list[tuple[int, int, str]] = field(default_factory=list)


def find_cycle(nodes: Sequence, edges) -> list | None:
    """One cycle (list of nodes, first repeated at the end) of the directed graph, or None."""
    succ: dict = {n: [] for n in nodes}
    for a, b in edges:
        succ.setdefault(a, []).append(b)
        succ.setdefault(b, [])
    state: dict = {}
    for root in succ:
        if state.get(root):
            continue
        stack = [(root, iter(succ[root]))]
        path = [root]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, iter(succ[nxt])))
                path.append(nxt)
    return None


def topo_order(nodes: Sequence, edges) -> list:
    """Nodes in a topological order (Kahn, ties by the given node order); ValueError on a cycle."""
    indeg = {n: 0 for n in nodes}
    succ: dict = {n: [] for n in nodes}
    for a, b in edges:
        if a not in indeg or b not in indeg:
            raise ValueError(f"edge ({a}, {b}) names an unknown node")
        succ[a].append(b)
        indeg[b] += 1
    rank = {n: i for i, n in enumerate(nodes)}
    ready = sorted([n for n in nodes if indeg[n] == 0], key=rank.get)
    out = []
    while ready:
        n = ready.pop(0)
        out.append(n)
        for m in succ[n]:
            indeg[m] -= 1
            if indeg[m] == 0:
                ready.append(m)
                ready.sort(key=rank.get)
    if len(out) != len(nodes):
        raise ValueError(f"dependency cycle: {find_cycle(nodes, edges)}")
    return out


def _reaches(succ: dict, src, dst) -> bool:
    seen, todo = set(), [src]
    while todo:
        n = todo.pop()
        if n == dst:
            return True
        if n not in seen:
            seen.add(n)
            todo.extend(succ.get(n, ()))
    return False


def build_dag(history: History, labels: Sequence[int], blame: bool = True) -> Dag:
    """Edges between milestones; ``labels[i]`` is the milestone of ``history.commits[i]``."""
    commits = history.commits
    if len(labels) != len(commits):
        raise ValueError(f"{len(labels)} labels for {len(commits)} commits")
    of = {c.sha: int(m) for c, m in zip(commits, labels, strict=True)}
    definer: dict[str, str] = {}
    for c in commits:
        for s in c.defines:
            definer.setdefault(s, c.sha)
    ignore = [a for d in history.dropped for a in ("--ignore-rev", d.sha) if d.reason != "merge"]
    evidence: dict[tuple[int, int], list[str]] = {}
    strong: set[tuple[int, int]] = set()
    for c in commits:
        b = of[c.sha]
        for sym in c.uses:
            src = definer.get(sym)
            if src and src != c.sha and of[src] != b:
                evidence.setdefault((of[src], b), []).append(f"{c.sha[:10]} uses {sym}")
                strong.add((of[src], b))
        if not blame or not c.parents:
            continue
        for ch in c.changes:
            spans = [(s, n) for s, n in ch.old_ranges if n > 0]
            if not spans:
                continue
            args = ["blame", "--porcelain", *ignore]
            for s, n in spans:
                args += ["-L", f"{s},+{n}"]
            out = git(history.repo, *args, c.parents[0], "--", ch.path, check=False)
            for line in out.splitlines():
                m = _PORCELAIN.match(line)
                if m and m[1] in of and of[m[1]] != b:
                    evidence.setdefault((of[m[1]], b), []).append(
                        f"{c.sha[:10]} changes {ch.path} lines of {m[1][:10]}"
                    )
    nodes = sorted(set(of.values()))
    dag = Dag(nodes)
    succ: dict[int, list[int]] = {}
    ranked = sorted(evidence, key=lambda e: (e not in strong, -len(evidence[e]), e))
    for a, b in ranked:
        kind = "Strong" if (a, b) in strong else "Weak"
        if _reaches(succ, b, a):
            dag.back_edges.append((a, b, f"{kind} edge would close a cycle"))
            continue
        succ.setdefault(a, []).append(b)
        dag.edges[(a, b)] = kind
        dag.evidence[(a, b)] = evidence[(a, b)]
    return dag
