"""An AiZynthFinder filter-policy strategy that rejects retro steps below a ChemCensor level.

Imports AiZynthFinder at the top: only AiZynthFinder's loader (or a user) imports this module.
Config (AiZynthFinder 4.x, ``filter:`` section)::

    filter:
      chemcensor:
        type: icml26.chemcensor.aizynth.ChemCensorFilter
        db: precedents.sqlite     # built with `icml26 chemcensor build-db`
        min_level: 1              # reject a step below this level (default 1)
        mapper: given             # AiZynthFinder's template atom maps (default); or rxnmapper
        max_center_type: 4
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aizynthfinder.context.policy.filter_strategies import FilterStrategy
from aizynthfinder.utils.exceptions import RejectionException

from icml26.chemcensor.adapters import aizynth_reaction_smiles
from icml26.chemcensor.scorer import ChemCensor
from icml26.core.errors import UserError

__all__ = ["ChemCensorFilter"]


class ChemCensorFilter(FilterStrategy):
    """Reject a retro step whose ChemCensor level is below ``min_level``.

    Keyword arguments (from the config): ``db`` (database file, required), ``min_level`` (int in
    [-1, 5], default 1), ``mapper`` (``given``: the step's own atom maps from
    ``mapped_reaction_smiles()``; ``rxnmapper``: map again), ``max_center_type`` (1..4).
    The level and its stage are written to ``reaction.metadata`` (``chemcensor_level``,
    ``chemcensor_stage``) whether or not the step is rejected.
    """

    _required_kwargs = ["db"]

    def __init__(self, key: str, config: Any, **kwargs: Any) -> None:
        super().__init__(key, config, **kwargs)
        try:
            self.min_level = int(kwargs.get("min_level", 1))
        except (TypeError, ValueError):
            raise UserError(
                f"ChemCensorFilter {key!r}: `min_level` must be an int; got {kwargs.get('min_level')!r}"
            ) from None
        if not -1 <= self.min_level <= 5:
            raise UserError(
                f"ChemCensorFilter {key!r}: `min_level` must be in [-1, 5]; got {self.min_level}"
            )
        self.mapper = str(kwargs.get("mapper", "given"))
        self.censor = ChemCensor(
            Path(kwargs["db"]),
            max_center_type=int(kwargs.get("max_center_type", 4)),
            mapper=self.mapper,
        )

    def apply(self, reaction: Any) -> None:
        rxn = aizynth_reaction_smiles(reaction, mapped=self.mapper == "given")
        lv = self.censor.score(rxn)
        reaction.metadata["chemcensor_level"] = lv.value
        reaction.metadata["chemcensor_stage"] = lv.stage
        if lv.value < self.min_level:
            raise RejectionException(
                f"{reaction} was filtered out: ChemCensor level {lv.value} < {self.min_level} "
                f"({lv.stage}: {lv.reason})"
            )
