"""A syntheseus ``BackwardReactionModel`` that filters or re-ranks another model's proposals by
ChemCensor level.

Imports syntheseus at the top (``pip install icml26[syntheseus]``); nothing else imports this
module::

    from icml26.chemcensor.synth_model import ChemCensorBackwardModel
    model = ChemCensorBackwardModel(LocalRetroModel(), "precedents.sqlite", min_level=1, mode="both")
    results = model([Molecule("CC(=O)NCc1ccccc1")], num_results=10)
    results[0][0].metadata["chemcensor_level"]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from syntheseus import BackwardReactionModel

from icml26.chemcensor.adapters import MODES, rank_by_level, syntheseus_reaction_smiles
from icml26.chemcensor.scorer import ChemCensor

__all__ = ["ChemCensorBackwardModel"]


class ChemCensorBackwardModel(BackwardReactionModel):
    """Score the proposals of ``model`` and filter and/or re-rank them by level.

    Parameters
    ----------
    model : the inner ``BackwardReactionModel`` (called as ``model(inputs, num_results=...)``).
    db : ``ReactionDB`` or database file path (or pass ``censor``, a ready :class:`ChemCensor`).
    mapper : ``"rxnmapper"`` (default: syntheseus reactions carry no atom maps) or ``"given"``.
    min_level : proposals below it are dropped (modes ``filter`` and ``both``); ``None`` keeps
        all of them.
    mode : ``"filter"``, ``"rerank"`` (by level, highest first, ties in the inner model's order)
        or ``"both"``.
    **kwargs : passed to ``BackwardReactionModel`` (``use_cache``, ``default_num_results``, ...).

    Each returned reaction's ``metadata`` gets ``chemcensor_level`` and ``chemcensor_stage``.
    """

    def __init__(
        self,
        model: Any,
        db=None,
        *,
        censor: ChemCensor | None = None,
        mapper: str = "rxnmapper",
        min_level: int | None = 1,
        mode: str = "both",
        **kwargs: Any,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}; got {mode!r}")
        if min_level is not None and not -1 <= int(min_level) <= 5:
            raise ValueError(f"min_level must be in [-1, 5] or None; got {min_level}")
        if censor is None and db is None:
            raise ValueError("give `db` (a ReactionDB or a database path) or `censor`")
        super().__init__(**kwargs)
        self.model = model
        self.censor = censor if censor is not None else ChemCensor(db, mapper=mapper)
        self.min_level = None if min_level is None else int(min_level)
        self.mode = mode

    def _get_reactions(self, inputs: list, num_results: int) -> list[Sequence]:
        batches = [list(rs) for rs in self.model(inputs, num_results=num_results)]
        flat = [r for rs in batches for r in rs]
        levels = self.censor.score_many([syntheseus_reaction_smiles(r) for r in flat])
        for r, lv in zip(flat, levels, strict=True):
            r.metadata["chemcensor_level"] = lv.value
            r.metadata["chemcensor_stage"] = lv.stage
        return [
            rank_by_level(
                rs,
                [r.metadata["chemcensor_level"] for r in rs],
                min_level=self.min_level,
                mode=self.mode,
            )
            for rs in batches
        ]

    def get_model_info(self) -> dict[str, Any]:
        info = dict(self.model.get_model_info()) if hasattr(self.model, "get_model_info") else {}
        return {**info, "chemcensor_min_level": self.min_level, "chemcensor_mode": self.mode}

    def get_parameters(self):
        return self.model.get_parameters()
