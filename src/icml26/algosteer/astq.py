"""Small queries over a parsed Python program, shared by the tasks' family rules.

Every rule in :mod:`icml26.algosteer.tasks` is written against :class:`Program`, so a family
decision depends only on the program's syntax tree: renaming identifiers (other than the task's
entry point and the names a family is defined by, e.g. ``lru_cache``) or reformatting the source
does not change it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = ["Program", "parse_program", "call_name", "dotted"]


def dotted(node: ast.AST) -> str:
    """``a.b.c`` for a Name/Attribute chain, ``""`` otherwise."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def call_name(node: ast.Call) -> str:
    """The last component of the called name: ``functools.lru_cache(...)`` -> ``lru_cache``."""
    name = dotted(node.func)
    return name.rsplit(".", 1)[-1] if name else ""


@dataclass
class Program:
    """A parsed program with the facts family rules ask about (computed lazily, cached)."""

    tree: ast.Module
    source: str
    _funcs: dict[str, list[ast.AST]] = field(default_factory=dict, repr=False)
    _all: list[ast.AST] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self._all = list(ast.walk(self.tree))  # walked once; every query filters this list
        for node in self._all:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._funcs.setdefault(node.name, []).append(node)

    # -- functions -----------------------------------------------------------------------
    @property
    def function_names(self) -> set[str]:
        return set(self._funcs)

    def functions(self) -> Iterator[ast.FunctionDef]:
        for defs in self._funcs.values():
            yield from defs

    def recursive_functions(self) -> set[str]:
        """Functions whose body calls themselves (``f(...)`` or ``self.f(...)``), directly or
        through another function defined in the program (mutual recursion)."""
        calls: dict[str, set[str]] = {}
        for fn in self.functions():
            called = set()
            for node in ast.walk(fn):
                if isinstance(node, ast.Call):
                    name = call_name(node)
                    if name in self._funcs:
                        called.add(name)
            calls.setdefault(fn.name, set()).update(called)
        rec = set()
        for start in calls:
            seen, stack = set(), list(calls[start])
            while stack:
                cur = stack.pop()
                if cur == start:
                    rec.add(start)
                    break
                if cur not in seen:
                    seen.add(cur)
                    stack.extend(calls.get(cur, ()))
        return rec

    def decorated_with(self, *names: str) -> bool:
        """Any function decorated with one of ``names`` (``@lru_cache``, ``@functools.cache(...)``)."""
        for fn in self.functions():
            for dec in fn.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                if dotted(target).rsplit(".", 1)[-1] in names:
                    return True
        return False

    # -- generic node queries -------------------------------------------------------------
    def nodes(self, *types: type) -> Iterator[ast.AST]:
        for node in self._all:
            if isinstance(node, types):
                yield node

    def calls(self, *names: str) -> list[ast.Call]:
        """Calls whose last name component is one of ``names``."""
        return [n for n in self.nodes(ast.Call) if call_name(n) in names]

    def calls_dotted(self, *names: str) -> list[ast.Call]:
        """Calls whose full dotted name is one of ``names`` (``dict.fromkeys``)."""
        return [n for n in self.nodes(ast.Call) if dotted(n.func) in names]

    def imports(self) -> set[str]:
        """Imported module names and imported symbols (``from heapq import heappush`` gives
        ``heapq`` and ``heappush``)."""
        out = set()
        for node in self.nodes(ast.Import, ast.ImportFrom):
            if isinstance(node, ast.Import):
                out.update(a.name.split(".")[0] for a in node.names)
            else:
                out.add((node.module or "").split(".")[0])
                out.update(a.name for a in node.names)
        return out

    def loop_depth(self) -> int:
        """Deepest nesting of ``for``/``while`` loops and comprehensions' generators."""

        def depth(node: ast.AST) -> int:
            inner = max((depth(c) for c in ast.iter_child_nodes(node)), default=0)
            if isinstance(node, (ast.For, ast.While, ast.AsyncFor)):
                return 1 + inner
            if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                return len(node.generators) + inner
            return inner

        return depth(self.tree)

    def has_loop(self) -> bool:
        return self.loop_depth() > 0

    def has_while(self) -> bool:
        return any(True for _ in self.nodes(ast.While))

    def numbers(self) -> set[float]:
        return {
            float(n.value)
            for n in self.nodes(ast.Constant)
            if isinstance(n.value, (int, float)) and not isinstance(n.value, bool)
        }

    def names(self) -> set[str]:
        """Every identifier used (names, attributes, arguments)."""
        out = {n.id for n in self.nodes(ast.Name)}
        out |= {n.attr for n in self.nodes(ast.Attribute)}
        out |= {a.arg for a in self.nodes(ast.arg)}
        return out

    def method_calls(self, *attrs: str) -> list[ast.Call]:
        """Calls ``x.attr(...)`` for ``attr`` in ``attrs`` (``.append``, ``.pop``)."""
        return [
            n
            for n in self.nodes(ast.Call)
            if isinstance(n.func, ast.Attribute) and n.func.attr in attrs
        ]

    def attribute_stores(self, attr: str) -> int:
        """How many assignments store into ``<expr>.attr``."""
        count = 0
        for node in self.nodes(ast.Assign, ast.AugAssign, ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if (
                        isinstance(sub, ast.Attribute)
                        and sub.attr == attr
                        and isinstance(sub.ctx, ast.Store)
                    ):
                        count += 1
        return count

    def tuple_swaps(self) -> int:
        """Assignments ``a, b = b, <expr>`` (a rolling pair)."""
        count = 0
        for node in self.nodes(ast.Assign):
            t, v = node.targets[0], node.value
            if (
                isinstance(t, ast.Tuple)
                and isinstance(v, ast.Tuple)
                and len(t.elts) == len(v.elts) >= 2
                and all(isinstance(e, ast.Name) for e in t.elts)
            ):
                count += 1
        return count

    def subscript_store_names(self) -> set[str]:
        """Names ``d`` that appear as ``d[k] = ...`` targets (containers filled by key)."""
        out = set()
        for node in self.nodes(ast.Assign, ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Subscript):
                    name = dotted(t.value)
                    if name:
                        out.add(name)
        return out

    def membership_tested(self) -> set[str]:
        """Names ``d`` tested with ``x in d`` / ``x not in d`` (or ``d.get(...)``)."""
        out = set()
        for node in self.nodes(ast.Compare):
            for op, comp in zip(node.ops, node.comparators, strict=True):
                if isinstance(op, (ast.In, ast.NotIn)) and dotted(comp):
                    out.add(dotted(comp))
        for node in self.method_calls("get", "setdefault"):
            name = dotted(node.func.value)
            if name:
                out.add(name)
        return out

    def dict_like_names(self) -> set[str]:
        """Names bound to a dict (``{}``, ``dict()``, ``defaultdict``) anywhere, including
        default arguments."""
        out = set()
        for node in self.nodes(ast.Assign, ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if _is_dict_expr(node.value):
                out.update(dotted(t) for t in targets if dotted(t))
        for fn in self.functions():
            args = fn.args
            pos = args.posonlyargs + args.args
            for a, d in zip(pos[len(pos) - len(args.defaults) :], args.defaults, strict=True):
                if _is_dict_expr(d):
                    out.add(a.arg)
            for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True):
                if d is not None and _is_dict_expr(d):
                    out.add(a.arg)
        return out


def _is_dict_expr(node: ast.AST | None) -> bool:
    if isinstance(node, (ast.Dict, ast.DictComp)):
        return True
    return isinstance(node, ast.Call) and call_name(node) in ("dict", "defaultdict", "OrderedDict")


def parse_program(code: str) -> Program | None:
    """:class:`Program` of ``code``, or ``None`` when it does not parse."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    return Program(tree, code)
