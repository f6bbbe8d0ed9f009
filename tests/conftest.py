"""Fixtures shared by every test folder, and the ``numerics`` mark.

``numerics``: every test in a module that builds a float64 reference (``float64`` or
``.double()`` in its source) is marked, so that ``make test`` can run those tests a second time
with ``ATEN_CPU_CAPABILITY=avx2``: torch's AVX2 kernels sum in another order than its AVX-512
ones, and a tolerance tuned on one family fails on the other. Tolerances of fp32 results against
a float64 reference come from :func:`fp32_atol`, not from a constant tuned on one CPU.
"""

import re
from pathlib import Path

import pytest

#: the spacing of float32 numbers at 1.0 (2^-23); unit roundoff is half of it
FP32_EPS = 2.0 ** -23


def fp32_atol(n_terms: int, magnitude: float, safety: float = 2.0) -> float:
    """An absolute tolerance for an fp32 result of ``n_terms`` accumulated products against an
    exact (float64) reference: the worst-case bound of recursive summation in any order,
    ``(n - 1) * u * sum|terms|`` with ``u = eps / 2``, times ``safety``; ``magnitude`` stands for
    ``sum|terms|`` (an upper bound on it, such as ``n_terms * max|term|``, or the result's scale
    when every term has one sign). Holds for any kernel order (AVX2, AVX-512, AMX), so it does
    not flake across CPUs, and stays far below the size of a real bug."""
    if n_terms < 1 or not magnitude >= 0:
        raise ValueError(f"fp32_atol: n_terms >= 1 and magnitude >= 0, got {n_terms}, {magnitude}")
    return safety * max(n_terms - 1, 1) * (FP32_EPS / 2) * magnitude


@pytest.fixture(name="fp32_atol", scope="session")
def _fp32_atol_fixture():
    """:func:`fp32_atol` as a fixture (test modules do not import conftest)."""
    return fp32_atol


_REFERENCE = re.compile(r"float64|\.double\(\)")
_MODULE_HAS_REFERENCE: dict[Path, bool] = {}


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(str(item.fspath))
        if path not in _MODULE_HAS_REFERENCE:
            try:
                _MODULE_HAS_REFERENCE[path] = bool(_REFERENCE.search(path.read_text("utf-8")))
            except OSError:
                _MODULE_HAS_REFERENCE[path] = False
        if _MODULE_HAS_REFERENCE[path]:
            item.add_marker(pytest.mark.numerics)


def _doc_commands(doc: Path, prefix: str = "icml26 ") -> list[str]:
    """The ``prefix ...`` lines of a Markdown file's fenced blocks: continuations joined, comments
    dropped."""
    out, fenced, buf = [], False, ""
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            continue
        buf += line.rstrip()
        if buf.endswith("\\"):
            buf = buf[:-1] + " "
            continue
        cmd = re.sub(r"\s+#.*$", "", buf).strip()
        buf = ""
        if cmd.startswith(prefix):
            out.append(cmd)
    return out


@pytest.fixture
def doc_commands():
    """``doc_commands(path)``: the documented CLI lines of a doc page, to run as written."""
    return _doc_commands


#: the most CPU seconds a landed claim may take at ``tiny`` (issue 40: tiny is the CI size)
TINY_BUDGET_CPU_S = 60.0


def pytest_terminal_summary(terminalreporter):
    """The CPU seconds of each landed claim's tiny run (the most per claim), so the log shows how
    close each is to :data:`TINY_BUDGET_CPU_S` on this machine."""
    most: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for rep in reports:
            for key, value in getattr(rep, "user_properties", ()):
                if key == "tiny_cpu_s":
                    name, cpu = value
                    most[name] = max(most.get(name, 0.0), cpu)
    if most:
        terminalreporter.write_sep("-", f"tiny claims, CPU-s (budget {TINY_BUDGET_CPU_S:.0f})")
        terminalreporter.write_line(", ".join(f"{n} {c:.1f}" for n, c in
                                              sorted(most.items(), key=lambda x: -x[1])))


@pytest.fixture(autouse=True)
def _tiny_claims_stay_tiny(request):
    """Every record a test writes for a landed claim at ``tiny`` with its default options must
    have used at most :data:`TINY_BUDGET_CPU_S` of process CPU time (``cpu_time_s``: user +
    system of every thread, so a loaded machine does not flake it). The claim tests run each
    landed claim at tiny (``tests/NAME/test_NAME_claim.py``; ``test_registry`` checks that each
    has one), so the whole suite is the budget test. Records whose units ran elsewhere carry no
    CPU time and are not checked."""
    # the folder is looked up before the test: at teardown tmp_path may be gone already
    root = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if root is None:
        return
    from icml26 import claims_index

    landed = {c.name for c in claims_index.CLAIMS if not c.planned}
    over = []
    for path in root.rglob("tiny.json"):
        if len(path.relative_to(root).parts) > 4:
            continue
        try:
            import json

            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        cpu = rec.get("cpu_time_s") if isinstance(rec, dict) else None
        if (rec.get("name") in landed and rec.get("scale") == "tiny" and not rec.get("options")
                and isinstance(cpu, int | float)):
            request.node.user_properties.append(("tiny_cpu_s", (rec["name"], float(cpu))))
            if cpu > TINY_BUDGET_CPU_S:
                over.append(f"{rec['name']}: {cpu:.1f} CPU-s")
    if over:
        pytest.fail(f"tiny claims over the {TINY_BUDGET_CPU_S:.0f} CPU-s budget (make their tiny "
                    f"settings smaller): {', '.join(over)}", pytrace=False)


_OLD_OUTPUT = None


def _old_output_class():
    """A model output shaped like transformers 5.17's: the cache field is ``past_key_values``
    (no ``.cache``)."""
    global _OLD_OUTPUT
    if _OLD_OUTPUT is None:
        from dataclasses import dataclass
        from typing import Any

        from transformers.utils import ModelOutput

        @dataclass
        class OldCacheOutput(ModelOutput):
            loss: Any = None
            logits: Any = None
            last_hidden_state: Any = None
            past_key_values: Any = None
            hidden_states: Any = None
            attentions: Any = None

        _OLD_OUTPUT = OldCacheOutput
    return _OLD_OUTPUT


def _old_cache_api(model):
    """Make an HF model (in place; returned) look like transformers 5.17's on either side of the
    ``past_key_values`` -> ``cache`` rename: its ``forward`` declares ``past_key_values`` and no
    ``cache``, a stray ``cache=`` keyword is dropped (5.17's ``**kwargs`` silently ignored it, so
    the call ran on a fresh cache), and the output carries ``past_key_values`` (no ``.cache``).
    A causal LM (``.model`` + ``.lm_head``) gets its decoder stack converted too, and calls it
    with ``past_key_values``, as 5.17's outer forward does. Instance attributes only: the class
    and every other instance are untouched. Under transformers 5.17 itself the model is returned
    as it is (its API already)."""
    import inspect

    from icml26.core.hfcache import output_cache

    old = _old_output_class()
    cls_forward = type(model).forward
    sig = inspect.signature(cls_forward)
    names = list(sig.parameters)
    if "cache" not in names:  # an older transformers (5.17) is installed: already its API
        assert "past_key_values" in names, f"{type(model).__name__}.forward takes no cache"
        return model
    params = [p.replace(name="past_key_values") if p.name == "cache" else p
              for p in list(sig.parameters.values())[1:]]
    body = getattr(model, "model", None)
    head = getattr(model, "lm_head", None)
    if body is not None and head is not None:
        _old_cache_api(body)

        def forward(input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                    inputs_embeds=None, labels=None, use_cache=None, logits_to_keep=0, **kwargs):
            kwargs.pop("cache", None)
            out = body(input_ids=input_ids, attention_mask=attention_mask,
                       position_ids=position_ids, past_key_values=past_key_values,
                       inputs_embeds=inputs_embeds, use_cache=use_cache, **kwargs)
            h = out.last_hidden_state
            keep = logits_to_keep
            if isinstance(keep, int):
                keep = slice(-keep, None)
            return old(logits=head(h[:, keep, :]), past_key_values=out.past_key_values,
                       hidden_states=out.hidden_states, attentions=out.attentions)
    else:

        def forward(*args, past_key_values=None, **kwargs):
            kwargs.pop("cache", None)
            out = cls_forward(model, *args, cache=past_key_values, **kwargs)
            return old(last_hidden_state=out.last_hidden_state, past_key_values=output_cache(out),
                       hidden_states=out.hidden_states, attentions=out.attentions)

    forward.__signature__ = sig.replace(parameters=params)
    model.forward = forward
    return model


@pytest.fixture
def old_cache_api():
    """``old_cache_api(model)``: :func:`_old_cache_api` (a transformers-5.17-shaped forward on a
    model of the installed transformers), for tests that guard the cache-keyword rename without
    5.17 installed."""
    return _old_cache_api
