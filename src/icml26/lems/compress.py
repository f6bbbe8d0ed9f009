"""One call from a dense HF causal LM to a low-rank one at a parameter budget.

    stats   = collect_kfac_stats(model, calib_batches)              # forward + backward hooks
    factors = factorize(model, stats, method="kfac")                  # full spectra kept
    ranks   = allocate(factors, model, 0.6, allocator="lems", search_batches=search)
    apply_ranks_(model, factors, ranks)                               # in place
    save_compressed(model, tokenizer, "out/")                         # an ordinary HF folder

or simply ``compress(model, calib_batches, CompressConfig(target=0.6))``. ``target`` is the
fraction of the target layers' weight parameters **kept** (embeddings, norms, head excluded).
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from icml26.core.errors import UserError
from icml26.lems.export import apply_ranks_, count_linear_params
from icml26.lems.factorize import LEFT_FACTORS, METHODS, LayerFactors, factorize
from icml26.lems.layers import TargetLayer, target_layers
from icml26.lems.lems import check_target, kept_fraction, uniform_ranks
from icml26.lems.search import KLScorer, SearchResult, layer_sensitivities, lems_search
from icml26.lems.stats import collect_kfac_stats

__all__ = ["ALLOCATORS", "CompressConfig", "CompressionReport", "allocate", "compress"]

ALLOCATORS = ("lems", "uniform")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompressConfig:
    """Settings of :func:`compress` (paper defaults).

    target: fraction of linear weight parameters kept, in (0, 1].
    decomposition: one of METHODS ("kfac", "svd_llm", "svd", "asvd", "fwsvd").
    allocator: "lems" (global search) or "uniform" (same kept fraction per layer).
    left_factor: KFAC's output-side factor, "official" (L_G) or "transpose" (L_G^T).
    trials: Optuna TPE trials of LEMS's (alpha, gamma) search; 0 = alpha 0, gamma 5.
    seed: Optuna's seed (42 in the official config).
    multiple: ranks are multiples of this (8).
    temperature: KL temperature (0.6); skip: positions ignored by the KL (None = length / 8).
    shrink_a / shrink_g: KFAC shrinkage of A (0.1) and G (0.3).
    kl_offload: where LEMS keeps its reference distributions and cached block outputs: None (the
        model's device), "cpu", or a directory (safetensors per search batch; for 8B models).
    """

    target: float = 0.8
    decomposition: str = "kfac"
    allocator: str = "lems"
    left_factor: str = "official"
    trials: int = 10
    seed: int = 42
    multiple: int = 8
    temperature: float = 0.6
    skip: int | None = None
    shrink_a: float = 0.1
    shrink_g: float = 0.3
    kl_offload: str | None = None

    def __post_init__(self) -> None:
        if not 0 < self.target <= 1:
            raise UserError(f"`target` (fraction kept) must be in (0, 1]; got {self.target}")
        if self.decomposition not in METHODS:
            raise UserError(f"`decomposition` must be one of {', '.join(METHODS)}; got {self.decomposition!r}")
        if self.allocator not in ALLOCATORS:
            raise UserError(f"`allocator` must be one of {', '.join(ALLOCATORS)}; got {self.allocator!r}")
        if self.left_factor not in LEFT_FACTORS:
            raise UserError(f"`left_factor` must be one of {', '.join(LEFT_FACTORS)}; got {self.left_factor!r}")
        if self.trials < 0 or self.multiple < 1:
            raise UserError(f"`trials` must be >= 0 and `multiple` >= 1; got {self.trials}, {self.multiple}")

    def to_dict(self) -> dict:
        return {"version": 1, **asdict(self)}

    @classmethod
    def from_dict(cls, d: dict) -> CompressConfig:
        d = dict(d)
        if d.pop("version", 1) != 1:
            raise ValueError("CompressConfig: unknown version")
        return cls(**d)


@dataclass
class CompressionReport:
    """What :func:`compress` did: ranks (None = dense), kept fraction, parameter counts."""

    ranks: dict[str, int | None]
    kept_fraction: float
    params_before: int
    params_after: int
    search: SearchResult | None = None
    config: dict = field(default_factory=dict)


def allocate(
    factors: dict[str, LayerFactors], model, target: float, allocator: str = "lems", *,
    search_batches=None, trials: int = 10, seed: int = 42, layers: list[TargetLayer] | None = None,
    multiple: int = 8, temperature: float = 0.6, skip: int | None = None,
    kl_cache: str | os.PathLike | None = None, scorer: KLScorer | None = None,
    kl_offload: str | os.PathLike | None = None, progress=None, return_search: bool = False,
):
    """Ranks ``{name: rank or None (dense)}`` keeping ``target`` of the linear parameters.

    ``allocator="lems"`` needs ``search_batches`` (list of LongTensor (b, T)) or a ready
    ``scorer``; its per-layer KLs are cached in ``kl_cache`` (JSON) when given. With
    ``return_search`` the LEMS :class:`SearchResult` (trials, KLs) is returned as well.
    ``kl_offload`` ("cpu" or a directory) keeps the scorer's reference distributions and block
    outputs off the accelerator (see :class:`~icml26.lems.search.KLScorer`).
    """
    if layers is None:
        layers = [lay for lay in target_layers(model) if lay.name in factors]
    check_target(target, layers, multiple=multiple)
    if allocator == "uniform":
        ranks = uniform_ranks(layers, target, multiple=multiple,
                              max_rank={n: f.s.numel() for n, f in factors.items()})
        return (ranks, None) if return_search else ranks
    if allocator != "lems":
        raise UserError(f"allocator must be one of {', '.join(ALLOCATORS)}; got {allocator!r}")
    if target >= 1:
        ranks = {lay.name: None for lay in layers}
        return (ranks, None) if return_search else ranks
    if scorer is None:
        if not search_batches:
            raise UserError("allocator 'lems' needs search_batches (a few calibration sequences)")
        scorer = KLScorer(model, search_batches, temperature=temperature, skip=skip,
                          offload=kl_offload)
    kls = layer_sensitivities(model, factors, layers, scorer, cache=kl_cache, progress=progress)
    result = lems_search(model, factors, layers, kls, target, scorer=scorer, trials=trials,
                         seed=seed, multiple=multiple, progress=progress)
    return (result.ranks, result) if return_search else result.ranks


def compress(model, calib_batches, config: CompressConfig | None = None, *, search_batches=None,
             layers: list[TargetLayer] | None = None, cache_dir: str | os.PathLike | None = None,
             progress=None) -> CompressionReport:
    """Compress ``model`` in place and return a :class:`CompressionReport`.

    ``calib_batches``: list of LongTensor (b, T) for the statistics; ``search_batches`` for LEMS
    (default: the first two calibration batches). ``cache_dir`` keeps statistics and KLs so that
    a rerun resumes. The ranks are also stored as ``model.config.rank_dict``.
    """
    config = config or CompressConfig()
    layers = layers if layers is not None else target_layers(model)
    check_target(config.target, layers, multiple=config.multiple)
    cache = Path(cache_dir) if cache_dir is not None else None
    stats = None
    if config.decomposition != "svd":
        stats = collect_kfac_stats(model, calib_batches, layers=layers,
                                   cache=cache / "stats.safetensors" if cache else None,
                                   progress=progress)
    factors = factorize(model, stats, config.decomposition, left_factor=config.left_factor,
                        layers=layers, shrink_a=config.shrink_a, shrink_g=config.shrink_g,
                        progress=progress)
    search_batches = search_batches or list(calib_batches)[:2]
    tag = f"{config.decomposition}:{config.left_factor}"
    ranks, search = allocate(
        factors, model, config.target, config.allocator, search_batches=search_batches,
        trials=config.trials, seed=config.seed, layers=layers, multiple=config.multiple,
        temperature=config.temperature, skip=config.skip, kl_offload=config.kl_offload,
        kl_cache=cache / f"kl-{tag.replace(':', '-')}.json" if cache else None,
        progress=progress, return_search=True)
    names = [lay.name for lay in layers]
    before = count_linear_params(model, names)
    applied = apply_ranks_(model, factors, ranks)
    after = count_linear_params(model, names)
    kept = kept_fraction(layers, ranks)
    model.config.rank_dict = applied
    log.info("lems: %d/%d layers low-rank, kept %.4f of %d linear params (%d after)",
             len(applied), len(layers), kept, before, after)
    return CompressionReport(ranks, kept, before, after, search, config.to_dict())
