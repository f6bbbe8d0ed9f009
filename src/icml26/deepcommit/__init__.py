"""DeepCommit + EvoClaw (arXiv 2603.13428): milestone DAGs from git history, EvoClaw scoring."""

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
