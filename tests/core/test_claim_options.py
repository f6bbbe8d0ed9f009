"""Strict ``--opt``: every claim declares the keys its code reads; the CLI refuses any other.

The registry test scans each claim package's source (``ast``) for option reads, so a new
``ctx.options.get("key")`` without a declaration in ``icml26/claim_options.py`` fails here.
Read forms it follows: ``X.options.get/pop(KEY)``, ``X.options[KEY]``, ``KEY in X.options``, the
same on a name bound to them (``o = ctx.options``, ``opts = dict(ctx.options)``, a parameter
``options``/``opts``/``opt``), a bound getter (``opt = ctx.options.get; opt(KEY)``), keys from a
literal loop (``for k in ("a", "b")``, ``for k in d`` with ``d`` a dict literal) and helpers that
read a key parameter (``_opt(ctx, "key")``). A read whose key it cannot resolve fails the test.
"""

import ast
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from icml26 import claim_options, claims_index
from icml26.cli import app
from icml26.core.claims import Claim, Measure, Result
from icml26.core.errors import UserError
from icml26.core.options import Opt, check_options

SRC = Path(__file__).resolve().parents[2] / "src" / "icml26"
ALIAS_PARAMS = {"options", "opts", "opt"}
runner = CliRunner()


# --------------------------------------------------------------------------------------------
# the static scan


def _is_opts(node, aliases) -> bool:
    if isinstance(node, ast.Attribute) and node.attr == "options":
        return True
    if isinstance(node, ast.Name) and node.id in aliases:
        return True
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "dict" and len(node.args) == 1 and _is_opts(node.args[0], aliases))


def _literal_strings(node, consts) -> list[str] | None:
    """The strings of a literal tuple/list/set, a dict's keys, or a name bound to one."""
    if isinstance(node, ast.Name) and node.id in consts:
        node = consts[node.id]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr in ("items", "keys") and not node.args:
        return _literal_strings(node.func.value, consts)
    elts = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
    if not isinstance(node, ast.Tuple | ast.List | ast.Set | ast.Dict) or elts is None:
        return None
    out = []
    for e in elts:
        if isinstance(e, ast.Tuple) and e.elts:  # for k, v in ((...), ...)
            e = e.elts[0]
        if not (isinstance(e, ast.Constant) and isinstance(e.value, str)):
            return None
        out.append(e.value)
    return out


class _Scan:
    def __init__(self) -> None:
        self.reads: dict[str, list[str]] = {}
        self.unresolved: list[str] = []
        self.helpers: dict[str, set[int | str]] = {}  # function -> its key parameters

    def module(self, tree: ast.Module, where: str) -> None:
        consts = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign)
                  for t in n.targets if isinstance(t, ast.Name)}
        self._scope(tree, where, set(), set(), {}, consts, [])

    def _scope(self, fn, where, aliases, getters, loops, consts, params) -> None:
        aliases, getters, consts = set(aliases), set(getters), dict(consts)
        body = list(self._walk(fn, loops, consts))
        for n, _ in body:  # bindings first: an alias may be read above its line in a loop
            if isinstance(n, ast.Assign) and len(n.targets) == 1 \
                    and isinstance(n.targets[0], ast.Name):
                name, v = n.targets[0].id, n.value
                consts[name] = v
                if _is_opts(v, aliases):
                    aliases.add(name)
                elif isinstance(v, ast.Attribute) and v.attr == "get" and _is_opts(v.value, aliases):
                    getters.add(name)
        body = list(self._walk(fn, loops, consts))  # loops over names bound above
        for n, in_loops in body:
            key = None
            if isinstance(n, ast.Call):
                f = n.func
                method = (isinstance(f, ast.Attribute) and f.attr in ("get", "pop")
                          and _is_opts(f.value, aliases))
                if n.args and (method or (isinstance(f, ast.Name) and f.id in getters)):
                    key = n.args[0]
            elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load) \
                    and _is_opts(n.value, aliases):
                key = n.slice
            elif isinstance(n, ast.Compare) and len(n.ops) == 1 \
                    and isinstance(n.ops[0], ast.In | ast.NotIn) and _is_opts(n.comparators[0], aliases):
                key = n.left
            if key is not None:
                self._key(key, f"{where}:{n.lineno}", fn, in_loops, params)
        for n, in_loops in body:
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                args = [a.arg for a in [*n.args.posonlyargs, *n.args.args, *n.args.kwonlyargs]]
                extra = {a.arg for a in (n.args.vararg, n.args.kwarg) if a is not None}
                inner = aliases | ({*args, *extra} & ALIAS_PARAMS)
                self._scope(n, where, inner - (set(args) - ALIAS_PARAMS), getters, in_loops,
                            consts, args)

    @staticmethod
    def _walk(fn, loops, consts):
        """``(node, loop keys)`` for the nodes of ``fn``'s own body (nested function definitions
        included, not their bodies: scanned as scopes of their own); ``loop keys`` maps each
        enclosing loop's variable to the strings it runs over (None: not a literal)."""
        start = [fn.body] if isinstance(fn, ast.Lambda) else list(ast.iter_child_nodes(fn))
        todo = [(n, loops) for n in start]
        while todo:
            n, here = todo.pop()
            yield n, here
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            gens = [n] if isinstance(n, ast.For) else getattr(n, "generators", [])
            if gens:
                here = dict(here)
                for g in gens:
                    target = g.target.elts[0] if isinstance(g.target, ast.Tuple) else g.target
                    if isinstance(target, ast.Name):
                        here[target.id] = _literal_strings(g.iter, consts)
            todo.extend((c, here) for c in ast.iter_child_nodes(n))

    def _key(self, node, where, fn, loops, params) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            self.reads.setdefault(node.value, []).append(where)
        elif isinstance(node, ast.Name) and loops.get(node.id) is not None:
            for k in loops[node.id]:
                self.reads.setdefault(k, []).append(where)
        elif isinstance(node, ast.Name) and node.id in params:
            self.helpers.setdefault(fn.name, set()).update({params.index(node.id), node.id})
        else:
            self.unresolved.append(f"{where}: key {ast.unparse(node)}")

    def calls(self, tree: ast.Module, where: str) -> None:
        """Keys given to the helpers found by :meth:`module` (positionally or by keyword)."""
        for n in ast.walk(tree):
            if not isinstance(n, ast.Call):
                continue
            f = n.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            for p in self.helpers.get(name, ()):
                args = [a for a in n.args] if isinstance(p, int) else \
                    [k.value for k in n.keywords if k.arg == p]
                arg = args[p] if isinstance(p, int) and p < len(args) else \
                    (args[0] if args and isinstance(p, str) else None)
                if arg is None:
                    continue
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    self.reads.setdefault(arg.value, []).append(f"{where}:{n.lineno} ({name})")
                else:
                    self.unresolved.append(f"{where}:{n.lineno}: {name}({ast.unparse(arg)})")


def option_reads(files) -> tuple[dict[str, list[str]], list[str]]:
    """``({key: [file:line, ...]}, [unresolved reads])`` over the Python files ``files``."""
    scan, trees = _Scan(), []
    for f in files:
        tree = ast.parse(Path(f).read_text(encoding="utf-8"))
        where = Path(f).relative_to(SRC.parent).as_posix() if SRC in Path(f).parents else str(f)
        trees.append((tree, where))
        scan.module(tree, where)
    for tree, where in trees:
        scan.calls(tree, where)
    return scan.reads, scan.unresolved


def claim_files(claim: Claim) -> list[Path]:
    """The source a claim's options can be read in: its method package (every module), or the
    one module for a claim that lives in ``icml26.core`` (the health check)."""
    module = claim.run.target.partition(":")[0].split(".")
    if module[1] == "core":
        return [SRC.joinpath(*module[1:]).with_suffix(".py")]
    return sorted(SRC.joinpath(module[1]).rglob("*.py"))


def declaration_problems(claim: Claim, files) -> list[str]:
    reads, unresolved = option_reads(files)
    declared = {o.name for o in claim.options}
    out = [f"{claim.name}: --opt {k!r} is read ({', '.join(reads[k][:2])}) but not declared in "
           "icml26/claim_options.py" for k in sorted(set(reads) - declared)]
    out += [f"{claim.name}: --opt {k!r} is declared but never read" for k in sorted(declared - set(reads))]
    out += [f"{claim.name}: cannot tell which --opt key {u} reads" for u in unresolved]
    return out


LANDED = [c for c in claims_index.CLAIMS if not c.planned]


@pytest.mark.parametrize("claim", LANDED, ids=[c.name for c in LANDED])
def test_declared_keys_equal_the_keys_the_code_reads(claim):
    assert declaration_problems(claim, claim_files(claim)) == []


def test_every_declaration_is_unique_and_described():
    for c in LANDED:
        names = [o.name for o in c.options]
        assert len(names) == len(set(names)), c.name
        assert c.options, f"{c.name}: reads no --opt at all?"


def test_a_planted_undeclared_key_fails_the_registry_check(tmp_path):
    oserve = claims_index.get("oserve")
    pkg = tmp_path / "oserve"
    shutil.copytree(SRC / "oserve", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    assert declaration_problems(oserve, sorted(pkg.rglob("*.py"))) == []
    claim_py = pkg / "claim.py"
    claim_py.write_text(claim_py.read_text() + '\n\ndef _more(ctx):\n'
                        '    return ctx.options.get("newkey", 1)\n')
    problems = declaration_problems(oserve, sorted(pkg.rglob("*.py")))
    assert len(problems) == 1 and "'newkey' is read" in problems[0]


SAMPLE = '''
KEYS = {"d1": 1, "d2": 2}

def _opt(ctx, key, default):
    return ctx.options.get(key, default)

def run(ctx, options=None):
    o = ctx.options
    opts = dict(ctx.options)
    get = ctx.options.get
    a = o.get("a") or o["b"] or ("c" in o) or opts["d"] or get("e") or _opt(ctx, "f", 0)
    for k in ("g", "h"):
        if k in o:
            pass
    for k in KEYS:
        o.get(k)
    ctx.options["w"] = 1          # a write, not a read
    x = {"o": 1}["o"]             # another dict
    return options.get("i"), ctx.options.pop("j"), _opt(ctx, key="k", default=0)

def bad(ctx, name):
    return ctx.options[name + "x"]
'''


def test_the_scan_follows_every_read_form(tmp_path):
    f = tmp_path / "claim.py"
    f.write_text(SAMPLE)
    reads, unresolved = option_reads([f])
    assert sorted(reads) == ["a", "b", "c", "d", "d1", "d2", "e", "f", "g", "h", "i", "j", "k"]
    assert len(unresolved) == 1 and "name + 'x'" in unresolved[0]


# --------------------------------------------------------------------------------------------
# declared choices that mirror a constant in the code (read from the source, no heavy import)


def _literal(path: Path, name: str) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign | ast.AnnAssign):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return _literal_strings(n.value, {})
    raise AssertionError(f"{name} not found in {path}")


def _choices(claim: str, key: str) -> tuple[str, ...]:
    return next(o.choices for o in claims_index.get(claim).options if o.name == key)


def test_declared_choices_match_the_code():
    assert set(claim_options.DTYPES) == set(_literal(SRC / "core" / "torchutil.py", "_DTYPES"))
    exp = SRC / "tie" / "experiment.py"
    assert _choices("tie", "serve_model") == tuple(_literal(exp, "_MODELS"))
    assert _choices("tie", "gpu") == tuple(_literal(exp, "_GPUS"))
    assert _choices("restore", "gate_rule") == tuple(
        _literal(SRC / "restore" / "study" / "builds.py", "GATE_RULES"))
    assert _choices("atlas", "model") == tuple(_literal(SRC / "atlas" / "bank.py", "MODELS"))
    systems = _literal(SRC / "cclrec" / "claim.py", "SYSTEMS")
    assert set(_choices("cclrec", "systems")) == {"all", "default", "ablations", *systems}


# --------------------------------------------------------------------------------------------
# Opt and check_options


def _claim(name, *opts):
    return Claim(name, "P", "S", "F", run=_record, area="t", options=tuple(opts))


N = Opt("n", "int", "a count", min=1)
RATE = Opt("rate", "float", "a fraction", min=0, max=1, exclusive_min=True)
FLAG = Opt("flag", "bool", "on or off")
MODE = Opt("mode", "choice", "a mode", choices=("a", "b"))
SIZES = Opt("sizes", "list", "sizes", item="int", min=1)
PARTS = Opt("parts", "list", "parts", choices=("x", "y"))
UNIT = Opt("unit", "str", "set by units()", internal=True)


@pytest.mark.parametrize(("opt", "good", "bad"), [
    (N, ["1", "40", "+3"], ["0", "-1", "1.5", "x", ""]),
    (RATE, ["0.5", "1", "1e-3"], ["0", "1.01", "nan", "inf", "half"]),
    (FLAG, ["0", "1"], ["true", "yes", "2", ""]),
    (MODE, ["a", "b"], ["c", "A", ""]),
    (SIZES, ["1", "1,2, 3"], ["0,1", "1,,2", "1,x", ""]),
    (PARTS, ["x", "x,y", ""], ["z", "x,z"]),
    (Opt("p", "path", "a path"), ["/a/b", "rel"], ["", " "]),
])
def test_values_are_checked_by_type_and_range(opt, good, bad):
    assert [v for v in good if opt.problem(v) is not None] == []
    assert [v for v in bad if opt.problem(v) is None] == []


def test_describe_gives_type_and_range():
    assert N.describe() == "int >= 1"
    assert RATE.describe() == "float in (0, 1]"
    assert FLAG.describe() == "0|1"
    assert MODE.describe() == "one of a|b"
    assert SIZES.describe() == "comma list of int >= 1"
    assert PARTS.describe() == "comma list of str: x|y"


@pytest.mark.parametrize("kwargs", [
    dict(type="number"), dict(type="choice"), dict(type="str", min=1), dict(type="int", min=2, max=1),
    dict(type="int", help=""), dict(type="int", help="two\nlines"), dict(type="list", item="path"),
])
def test_bad_declarations_are_refused(kwargs):
    with pytest.raises(ValueError, match="Opt 'k'"):
        Opt(**{"name": "k", "help": "h", **kwargs})


def test_check_options_names_the_key_and_lists_the_claims_keys():
    c = _claim("c", N, FLAG, UNIT)
    assert check_options([c], {"n": "2"}) == {"c": {"n": "2"}}
    with pytest.raises(UserError, match=r"--opt nn: unknown key for c \(did you mean 'n'\?\); "
                                        r"c accepts: flag, n$"):
        check_options([c], {"nn": "2"})
    with pytest.raises(UserError, match=r"--opt n='0' for c: must be int >= 1; c accepts: flag, n"):
        check_options([c], {"n": "0"})
    with pytest.raises(UserError, match="unknown key for c"):  # internal: never from the CLI
        check_options([c], {"unit": "MostPop"})
    with pytest.raises(UserError, match="c accepts no --opt keys"):
        check_options([_claim("c")], {"n": "1"})


def test_several_claims_each_get_their_own_keys():
    a, b = _claim("a", N), _claim("b", N, MODE)
    assert check_options([a, b], {"mode": "a", "n": "3"}) == {"a": {"n": "3"},
                                                              "b": {"mode": "a", "n": "3"}}
    with pytest.raises(UserError, match=r"--opt n='x' for a: expected an integer"):
        check_options([a, b], {"n": "x"})
    with pytest.raises(UserError, match=r"no claim of this run \(a, b\) accepts it"):
        check_options([a, b], {"zz": "1"})


# --------------------------------------------------------------------------------------------
# the command line


def _record(ctx):
    (ctx.out_dir / "options.json").write_text(json.dumps(dict(ctx.options)))
    return Result(rows=[{"system": "m", "v": 1}], headline=Measure("h", 2.0, "x"), target=1.0)


@pytest.fixture
def opt_claims(monkeypatch):
    claims = [_claim("good", N, RATE, FLAG, MODE, SIZES, UNIT), _claim("other", MODE)]
    monkeypatch.setattr(claims_index, "CLAIMS", claims)
    return claims


def _reproduce(tmp_path, *args):
    return runner.invoke(app, ["reproduce", "--scale", "tiny", "--out", str(tmp_path),
                               "--no-report", *args])


def _one_line_error(r) -> str:
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1, r.output
    return lines[0]


def test_unknown_key_is_exit_2_listing_the_valid_keys(opt_claims, tmp_path):
    line = _one_line_error(_reproduce(tmp_path, "good", "--opt", "modle=/my/model"))
    assert "modle" in line and "good accepts: flag, mode, n, rate, sizes" in line
    assert "did you mean 'mode'" in line
    assert not (tmp_path / "good").exists()  # refused before the claim started


def test_wrong_type_is_exit_2_naming_the_key(opt_claims, tmp_path):
    line = _one_line_error(_reproduce(tmp_path, "good", "--opt", "n=many"))
    assert "--opt n='many'" in line and "expected an integer" in line and "good accepts:" in line
    line = _one_line_error(_reproduce(tmp_path, "good", "--opt", "flag=true"))
    assert "--opt flag='true'" in line and "0 or 1" in line
    line = _one_line_error(_reproduce(tmp_path, "good", "--opt", "mode=c"))
    assert "--opt mode='c'" in line and "a|b" in line


def test_out_of_range_is_exit_2(opt_claims, tmp_path):
    line = _one_line_error(_reproduce(tmp_path, "good", "--opt", "n=0"))
    assert "--opt n='0'" in line and "int >= 1" in line
    line = _one_line_error(_reproduce(tmp_path, "good", "--opt", "rate=1.5"))
    assert "(0, 1]" in line
    line = _one_line_error(_reproduce(tmp_path, "good", "--opt", "sizes=4,0"))
    assert "item '0'" in line


def test_one_bad_claim_stops_the_whole_run_before_it_starts(opt_claims, tmp_path):
    _one_line_error(_reproduce(tmp_path, "good", "other", "--opt", "n=0"))
    assert not (tmp_path / "good").exists() and not (tmp_path / "other").exists()


def test_valid_options_reach_the_claim(opt_claims, tmp_path):
    r = _reproduce(tmp_path, "good", "other", "--opt", "n=3", "--opt", "mode=b",
                   "--opt", "sizes=1,2", "--opt", "flag=1")
    assert r.exit_code == 0, r.output
    got = json.loads((tmp_path / "good" / "tiny" / "options.json").read_text())
    assert got == {"n": "3", "mode": "b", "sizes": "1,2", "flag": "1"}
    assert json.loads((tmp_path / "other" / "tiny" / "options.json").read_text()) == {"mode": "b"}
    assert "other: does not take --opt flag, n, sizes" in " ".join(r.output.split())
    rec = json.loads((tmp_path / "other" / "tiny.json").read_text())
    assert rec["options"] == {"mode": "b"}


def test_show_lists_the_keys_with_type_range_and_help(opt_claims, tmp_path):
    r = runner.invoke(app, ["show", "good", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    assert "n (int >= 1): a count" in out
    assert "rate (float in (0, 1]): a fraction" in out
    assert "mode (one of a|b): a mode" in out
    assert "unit (" not in out and "set by units()" not in out  # internal keys are not shown


def test_show_lists_a_real_claims_keys(tmp_path):
    r = runner.invoke(app, ["show", "atlas", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    assert "model (one of 1PL|2PL|3PL): the IRT model, not an LM" in out
    assert "linking (0|1)" in out
