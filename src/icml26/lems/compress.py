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
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from icml26.core.errors import UserError
from icml26.lems.allocators import atp_ranks, energy_ranks
from icml26.lems.export import apply_ranks_, count_linear_params
from icml26.lems.factorize import LEFT_FACTORS, METHODS, LayerFactors, factorize
from icml26.lems.layers import TargetLayer, target_layers
from icml26.lems.lems import check_target, kept_fraction, uniform_ranks
from icml26.lems.search import KLScorer, SearchResult, layer_sensitivities, lems_search
from icml26.lems.stats import collect_kfac_stats

__all__ = ["ALLOCATORS", "CompressConfig", "CompressionReport", "allocate", "compress"]

ALLOCATORS = ("lems", "uniform", "energy", "atp")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompressConfig:
    """Settings of :func:`compress` (paper defaults).

    target: fraction of linear weight parameters kept, in (0, 1].
    decomposition: one of METHODS ("kfac", "svd_llm", "svd", "asvd", "fwsvd").
    allocator: "lems" (global search), "uniform" (same kept fraction per layer), "energy"
        (SVD-LLM v2's rule) or "atp" (an ATP-like depth ramp); see :mod:`icml26.lems.allocators`.
    left_factor: KFAC's output-side factor: "transpose" (L_G^T, the exact K-FAC error; default),
        "official" (L_G, the official code and the paper's numbers) or "identity" (G = I).
    trials: Optuna TPE trials of LEMS's (alpha, gamma) search; 0 = alpha 0, gamma 5.
    n_startup_trials: TPE's random start-up trials (None: Optuna's 10, so 10 trials are random).
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
    left_factor: str = "transpose"
    trials: int = 10
    n_startup_trials: int | None = None
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
        if self.trials < 0:
            raise UserError(f"`trials` must be >= 0; got {self.trials}")
        if self.n_startup_trials is not None and self.n_startup_trials < 0:
            raise UserError(f"`n_startup_trials` must be >= 0 (or None); got {self.n_startup_trials}")
        if self.multiple < 1:
            raise UserError(f"`multiple` must be >= 1; got {self.multiple}")
        for name in ("shrink_a", "shrink_g"):
            if not 0 <= getattr(self, name) <= 1:
                raise UserError(f"`{name}` must be in [0, 1]; got {getattr(self, name)}")
        if self.temperature <= 0:
            raise UserError(f"`temperature` must be > 0; got {self.temperature}")

    def to_dict(self) -> dict:
        return {"version": 1, **asdict(self)}

    @classmethod
    def from_dict(cls, d: dict) -> CompressConfig:
        d = dict(d)
        if d.pop("version", 1) != 1:
            raise ValueError("CompressConfig: unknown version")
        unknown = sorted(set(d) - {f.name for f in fields(cls)})
        if unknown:
            raise UserError(f"CompressConfig: unknown field(s) {', '.join(unknown)}")
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
    n_startup_trials: int | None = None,
):
    """Ranks ``{name: rank or None (dense)}`` keeping ``target`` of the linear parameters.

    ``allocator="lems"`` (and ``"atp"``) needs ``search_batches`` (list of LongTensor (b, T)) or a ready
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
    if allocator not in ALLOCATORS:
        raise UserError(f"allocator must be one of {', '.join(ALLOCATORS)}; got {allocator!r}")
    missing = [lay.name for lay in layers if lay.name not in factors]
    if missing:
        raise UserError(f"factors lack {len(missing)} target layers, e.g. {missing[0]!r}")
    if target >= 1:
        ranks = {lay.name: None for lay in layers}
        return (ranks, None) if return_search else ranks
    if allocator == "energy":
        ranks = energy_ranks(layers, factors, target, multiple=multiple)
        return (ranks, None) if return_search else ranks
    if scorer is None:
        if not search_batches:
            raise UserError(f"allocator {allocator!r} needs search_batches (a few held-out sequences)")
        scorer = KLScorer(model, search_batches, temperature=temperature, skip=skip,
                          offload=kl_offload)
    if allocator == "atp":
        ranks, _ = atp_ranks(model, layers, factors, target, scorer, multiple=multiple,
                             progress=progress)
        return (ranks, None) if return_search else ranks
    kls = layer_sensitivities(model, factors, layers, scorer, cache=kl_cache, progress=progress)
    result = lems_search(model, factors, layers, kls, target, scorer=scorer, trials=trials,
                         seed=seed, multiple=multiple, n_startup_trials=n_startup_trials,
                         progress=progress)
    return (result.ranks, result) if return_search else result.ranks


def compress(model, calib_batches, config: CompressConfig | None = None, *, search_batches=None,
             layers: list[TargetLayer] | None = None, cache_dir: str | os.PathLike | None = None,
             progress=None) -> CompressionReport:
    """Compress ``model`` in place and return a :class:`CompressionReport`.

    ``calib_batches``: list of LongTensor (b, T) for the statistics; ``search_batches`` for LEMS
    and ATP (default: held out from ``calib_batches`` -- its last ``max(1, len // 8)`` batches
    become the search set and are not used for the statistics, so that the search scores the
    ranks on data the factorizations were not fitted to). ``cache_dir`` keeps statistics and KLs so that
    a rerun resumes. The ranks are also stored as ``model.config.rank_dict``.
    """
    config = config or CompressConfig()
    if not isinstance(config, CompressConfig):
        raise UserError(f"`config` must be a CompressConfig; got {type(config).__name__}")
    layers = layers if layers is not None else target_layers(model)
    check_target(config.target, layers, multiple=config.multiple)
    calib_batches = list(calib_batches)
    needs_search = config.allocator in ("lems", "atp") and config.target < 1
    if needs_search and not search_batches:
        if len(calib_batches) < 2:
            raise UserError(
                f"allocator {config.allocator!r} needs a search set disjoint from calibration: pass "
                f"`search_batches`, or at least 2 calibration batches (got {len(calib_batches)})")
        n_hold = max(1, len(calib_batches) // 8)
        calib_batches, search_batches = calib_batches[:-n_hold], calib_batches[-n_hold:]
    if not calib_batches and config.decomposition != "svd":
        raise UserError(f"decomposition {config.decomposition!r} needs calibration batches; got none")
    cache = Path(cache_dir) if cache_dir is not None else None
    stats = None
    if config.decomposition != "svd":
        stats = collect_kfac_stats(model, calib_batches, layers=layers,
                                   cache=cache / "stats.safetensors" if cache else None,
                                   progress=progress)
    factors = factorize(model, stats, config.decomposition, left_factor=config.left_factor,
                        layers=layers, shrink_a=config.shrink_a, shrink_g=config.shrink_g,
                        progress=progress)
    tag = f"{config.decomposition}:{config.left_factor}"
    ranks, search = allocate(
        factors, model, config.target, config.allocator, search_batches=search_batches,
        trials=config.trials, seed=config.seed, layers=layers, multiple=config.multiple,
        temperature=config.temperature, skip=config.skip, kl_offload=config.kl_offload,
        kl_cache=cache / f"kl-{tag.replace(':', '-')}.json" if cache else None,
        progress=progress, return_search=True, n_startup_trials=config.n_startup_trials)
    names = [lay.name for lay in layers]
    before = count_linear_params(model, names)
    applied = apply_ranks_(model, factors, ranks)
    after = count_linear_params(model, names)
    kept = kept_fraction(layers, ranks)
    model.config.rank_dict = applied
    log.info("lems: %d/%d layers low-rank, kept %.4f of %d linear params (%d after)",
             len(applied), len(layers), kept, before, after)
    return CompressionReport(ranks, kept, before, after, search, config.to_dict())
