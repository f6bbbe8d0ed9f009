"""Algorithm steering ("The Invisible Lottery", arXiv 2606.04057): how incidental prompt cues shift
the algorithm families code LLMs choose among programs that pass the same tests.

Pipeline: task x cue x sample grid (:func:`run_grid`) -> sandboxed functional tests
(:func:`run_tests`, :class:`SandboxPool`) -> AST family labels (:func:`classify`) -> family-share
shifts, TVD, homogeneity tests (:mod:`icml26.algosteer.stats`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from icml26.core.lazy import lazy_exports

if TYPE_CHECKING:
    from icml26.algosteer.backends import ChatBackend, HFBackend, OpenAIBackend
    from icml26.algosteer.classify import classify, extract_code
    from icml26.algosteer.cues import CUES, Cue, build_messages
    from icml26.algosteer.grid import GridConfig, run_grid
    from icml26.algosteer.sandbox import Limits, SandboxPool, run_tests
    from icml26.algosteer.tasks import TASKS, Task, get_task

__all__ = [
    "TASKS",
    "Task",
    "get_task",
    "CUES",
    "Cue",
    "build_messages",
    "classify",
    "extract_code",
    "Limits",
    "run_tests",
    "SandboxPool",
    "GridConfig",
    "run_grid",
    "HFBackend",
    "OpenAIBackend",
    "ChatBackend",
]

# Each name is imported from its submodule on first use, so that ``icml26.algosteer.cli`` stays light.
_WHERE = {
    "ChatBackend": "backends",
    "HFBackend": "backends",
    "OpenAIBackend": "backends",
    "classify": "classify",
    "extract_code": "classify",
    "CUES": "cues",
    "Cue": "cues",
    "build_messages": "cues",
    "GridConfig": "grid",
    "run_grid": "grid",
    "Limits": "sandbox",
    "SandboxPool": "sandbox",
    "run_tests": "sandbox",
    "TASKS": "tasks",
    "Task": "tasks",
    "get_task": "tasks",
}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
