"""Shortest path [paper: shortest path]: Dijkstra with a heap, Dijkstra with a linear scan for
the closest node, Bellman-Ford, Floyd-Warshall, FIFO-queue relaxation (BFS/SPFA), exhaustive
depth-first search."""

from __future__ import annotations

import ast

from icml26.algosteer.astq import Program
from icml26.algosteer.tasks.base import Case, Task

PROMPT = (
    "Write a Python function `shortest_path(graph, source, target)` that returns the total "
    "weight of a shortest path from `source` to `target` in a directed graph, or -1 if `target` "
    "cannot be reached. `graph` is a dict mapping every node to a list of `(neighbor, weight)` "
    "pairs; weights are positive integers."
)

HARNESS = """
import heapq as _hq

def _sp_ref(graph, source, target):
    dist, heap = {source: 0}, [(0, source)]
    while heap:
        d, u = _hq.heappop(heap)
        if u == target:
            return d
        if d > dist[u]:
            continue
        for v, w in graph[u]:
            if d + w < dist.get(v, float("inf")):
                dist[v] = d + w
                _hq.heappush(heap, (d + w, v))
    return -1

def _grid(n):
    # n x n grid, edges right and down with deterministic weights 1..9, plus a few shortcuts
    g = {}
    for r in range(n):
        for c in range(n):
            u = r * n + c
            g[u] = []
            if c + 1 < n:
                g[u].append((u + 1, 1 + (u * 7) % 9))
            if r + 1 < n:
                g[u].append((u + n, 1 + (u * 5) % 9))
            if (u * 13) % 17 == 0 and u + 2 * n + 1 < n * n:
                g[u].append((u + 2 * n + 1, 3))
    return g
"""

_GRAPHS = (
    ("{'a': []}", "'a'", "'a'"),
    ("{'a': [('b', 1)], 'b': []}", "'a'", "'b'"),
    ("{'a': [('b', 1)], 'b': []}", "'b'", "'a'"),
    (
        "{'a': [('b', 4), ('c', 1)], 'b': [('d', 1)], 'c': [('b', 2), ('d', 5)], 'd': []}",
        "'a'",
        "'d'",
    ),
    (
        "{1: [(2, 7), (3, 9), (6, 14)], 2: [(1, 7), (3, 10), (4, 15)], 3: [(1, 9), (2, 10), (4, 11), (6, 2)], "
        "4: [(2, 15), (3, 11), (5, 6)], 5: [(4, 6), (6, 9)], 6: [(1, 14), (3, 2), (5, 9)]}",
        "1",
        "5",
    ),
    ("{0: [(1, 1)], 1: [(2, 1)], 2: [(0, 1)], 3: [(0, 1)]}", "0", "3"),
    ("_grid(6)", "0", "35"),
)


def rules(p: Program) -> tuple[str, str] | None:
    if p.calls("heappush", "heappop", "heapify", "PriorityQueue") or "heapq" in p.imports():
        return "dijkstra_heap", "priority queue (heapq)"
    if p.loop_depth() >= 3 and any(
        isinstance(n, ast.Subscript) and isinstance(n.value, ast.Subscript)
        for n in p.nodes(ast.Subscript)
    ):
        return "floyd_warshall", "triple loop over a distance matrix"
    rec = p.recursive_functions()
    if rec:
        return "dfs", f"recursive search {sorted(rec)[0]!r}"
    if p.calls("min") and p.has_while() or _closest_scan(p):
        return "dijkstra_scan", "pick the closest unvisited node by a scan"
    if p.method_calls("popleft") or (
        p.method_calls("pop")
        and any(
            c.args and isinstance(c.args[0], ast.Constant) and c.args[0].value == 0
            for c in p.method_calls("pop")
        )
    ):
        return "queue_relax", "FIFO queue with relaxation (BFS/SPFA)"
    if p.loop_depth() >= 2 and _counted_outer_loop(p):
        return "bellman_ford", "relax every edge |V| - 1 times"
    if p.method_calls("pop") and p.has_while():
        return "dfs", "explicit stack search"
    return None


def _closest_scan(p: Program) -> bool:
    return bool(p.calls("min")) and p.loop_depth() >= 2


def _counted_outer_loop(p: Program) -> bool:
    """A ``for _ in range(len(graph) - 1)`` style outer loop (a pass count)."""
    for loop in p.nodes(ast.For):
        if isinstance(loop.iter, ast.Call) and getattr(loop.iter.func, "id", "") == "range":
            inner = [n for n in ast.walk(loop) if isinstance(n, ast.For) and n is not loop]
            if inner:
                return True
    return False


REFERENCES = {
    "dijkstra_heap": (
        "import heapq\n\ndef shortest_path(graph, source, target):\n"
        "    dist = {source: 0}\n    heap = [(0, source)]\n    done = set()\n"
        "    while heap:\n        d, u = heapq.heappop(heap)\n        if u in done:\n"
        "            continue\n        if u == target:\n            return d\n        done.add(u)\n"
        "        for v, w in graph[u]:\n            if d + w < dist.get(v, float('inf')):\n"
        "                dist[v] = d + w\n                heapq.heappush(heap, (d + w, v))\n"
        "    return -1\n",
    ),
    "dijkstra_scan": (
        "def shortest_path(graph, source, target):\n    dist = {u: float('inf') for u in graph}\n"
        "    dist[source] = 0\n    todo = set(graph)\n    while todo:\n"
        "        u = min(todo, key=lambda x: dist[x])\n        if dist[u] == float('inf'):\n"
        "            break\n        todo.remove(u)\n        for v, w in graph[u]:\n"
        "            if dist[u] + w < dist[v]:\n                dist[v] = dist[u] + w\n"
        "    return -1 if dist[target] == float('inf') else dist[target]\n",
    ),
    "bellman_ford": (
        "def shortest_path(graph, source, target):\n    inf = float('inf')\n"
        "    dist = {u: inf for u in graph}\n    dist[source] = 0\n"
        "    for _ in range(len(graph) - 1):\n        changed = False\n        for u in graph:\n"
        "            for v, w in graph[u]:\n                if dist[u] + w < dist[v]:\n"
        "                    dist[v] = dist[u] + w\n                    changed = True\n"
        "        if not changed:\n            break\n"
        "    return -1 if dist[target] == inf else dist[target]\n",
    ),
    "floyd_warshall": (
        "def shortest_path(graph, source, target):\n    nodes = list(graph)\n"
        "    inf = float('inf')\n    d = {u: {v: (0 if u == v else inf) for v in nodes} for u in nodes}\n"
        "    for u in nodes:\n        for v, w in graph[u]:\n            d[u][v] = min(d[u][v], w)\n"
        "    for k in nodes:\n        for i in nodes:\n            for j in nodes:\n"
        "                if d[i][k] + d[k][j] < d[i][j]:\n                    d[i][j] = d[i][k] + d[k][j]\n"
        "    return -1 if d[source][target] == inf else d[source][target]\n",
    ),
    "queue_relax": (
        "from collections import deque\n\ndef shortest_path(graph, source, target):\n"
        "    dist = {source: 0}\n    queue = deque([source])\n    while queue:\n"
        "        u = queue.popleft()\n        for v, w in graph[u]:\n"
        "            if dist[u] + w < dist.get(v, float('inf')):\n                dist[v] = dist[u] + w\n"
        "                queue.append(v)\n    return dist.get(target, -1)\n",
    ),
    "dfs": (
        "def shortest_path(graph, source, target):\n    best = [float('inf')]\n"
        "    def go(u, d, seen):\n        if d >= best[0]:\n            return\n"
        "        if u == target:\n            best[0] = d\n            return\n"
        "        for v, w in graph[u]:\n            if v not in seen:\n"
        "                seen.add(v)\n                go(v, d + w, seen)\n                seen.remove(v)\n"
        "    go(source, 0, {source})\n    return -1 if best[0] == float('inf') else best[0]\n",
    ),
}

TASK = Task(
    name="shortest",
    title="Shortest path (weighted)",
    prompt=PROMPT,
    entry="shortest_path",
    harness=HARNESS,
    functional=tuple(
        Case(f"shortest_path({g}, {s}, {t})", f"_sp_ref({g}, {s}, {t})") for g, s, t in _GRAPHS
    ),
    large=(
        Case(
            "shortest_path(_grid(150), 0, 150 * 150 - 1)", "_sp_ref(_grid(150), 0, 150 * 150 - 1)"
        ),
    ),
    families=(
        "dijkstra_heap",
        "dijkstra_scan",
        "bellman_ford",
        "floyd_warshall",
        "queue_relax",
        "dfs",
    ),
    rules=rules,
    references=REFERENCES,
    named=("dijkstra_heap", "Dijkstra's algorithm with a binary heap (heapq)"),
    source="paper",
)
