"""DeepCommit + EvoClaw (arXiv 2603.13428): milestone DAGs from git history, EvoClaw scoring."""

from __future__ import annotations

from typing import TYPE_CHECKING

from icml26.core.lazy import lazy_exports

if TYPE_CHECKING:
    from icml26.deepcommit.dag import Dag, build_dag
    from icml26.deepcommit.export import load_dataset, write_dataset
    from icml26.deepcommit.history import History, load_history
    from icml26.deepcommit.milestones import GroupConfig, group
    from icml26.deepcommit.score import MilestoneTests, RunOutcome, score_milestone, score_trial

__all__ = [
    "load_history",
    "History",
    "group",
    "GroupConfig",
    "build_dag",
    "Dag",
    "write_dataset",
    "load_dataset",
    "MilestoneTests",
    "RunOutcome",
    "score_milestone",
    "score_trial",
]

# Each name is imported from its submodule on first use, so that ``icml26.deepcommit.cli`` stays light.
_WHERE = {
    "Dag": "dag",
    "build_dag": "dag",
    "load_dataset": "export",
    "write_dataset": "export",
    "History": "history",
    "load_history": "history",
    "GroupConfig": "milestones",
    "group": "milestones",
    "MilestoneTests": "score",
    "RunOutcome": "score",
    "score_milestone": "score",
    "score_trial": "score",
}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
