"""Algorithm steering ("The Invisible Lottery", arXiv 2606.04057): how incidental prompt cues shift
the algorithm families code LLMs choose among programs that pass the same tests.

Pipeline: task x cue x sample grid (:func:`run_grid`) -> sandboxed functional tests
(:func:`run_tests`, :class:`SandboxPool`) -> AST family labels (:func:`classify`) -> family-share
shifts, TVD, homogeneity tests (:mod:`icml26.algosteer.stats`).
"""

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
