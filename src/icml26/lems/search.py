"""LEMS's measured parts: per-layer KL sensitivity and the Optuna search over the depth bias.

Both score a model by ``KL(p_orig || p)`` on a small search set, with both distributions at
temperature T (0.6) and the first ``skip`` positions of each sequence ignored (the official code
skips 256 of 2048; here 1/8 of the length by default). The reference distribution is computed
once (and can live on the CPU or on disk: ``KLScorer(offload=...)``). To make the 200-odd single-layer evaluations cheap, the dense pass also caches the
output of every block; a layer in block b is then scored by replaying the cached output in place
of blocks 0..b-1 and running only blocks b..B-1 and the head.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from icml26.core.io import atomic_write_json
from icml26.lems.factorize import LayerFactors
from icml26.lems.layers import TargetLayer, block_list, swapped_weights
from icml26.lems.lems import depth_multiplier, layer_options, solve_knapsack

__all__ = ["KLScorer", "layer_sensitivities", "SearchResult", "lems_search", "solve_lems", "ranks_summary"]


def _detach(out):
    if isinstance(out, torch.Tensor):
        return out.detach()
    if isinstance(out, tuple):
        return tuple(_detach(o) for o in out)
    return out


class KLScorer:
    """``KL(p_orig || p_model)`` on fixed search batches, with replay from cached block outputs.

    Built from the *dense* model: stores the reference distribution ``p`` (bfloat16, positions
    >= skip), its per-batch constant ``sum p log p_orig`` (float64), and the output of every block
    for every batch. ``score(model, start_block)`` then reruns only blocks >= start_block (the
    caller guarantees blocks before it are unchanged) and needs, per position, one logsumexp and
    one dot product with ``p``: ``KL = sum p log p_orig - sum p z / T + (sum p) lse(z / T)``.

    ``offload`` says where the reference and the cached block outputs live: ``None`` (the model's
    device), ``"cpu"`` (host memory; moved to the device one batch at a time), or a directory path
    (one safetensors file per search batch, read back lazily -- for 8B models whose references,
    32 x 2048 positions x 128k vocabulary, do not fit next to the model). Only the batch being
    scored is ever on the device.
    """

    def __init__(self, model, batches: list[torch.Tensor], *, temperature: float = 0.6,
                 skip: int | None = None, offload: str | os.PathLike | None = None):
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0; got {temperature}")
        if not batches:
            raise ValueError("KLScorer needs at least one search batch")
        self.batches = batches
        self.temperature = temperature
        t = batches[0].shape[1]
        self.skip = t // 8 if skip is None else skip
        if not 0 <= self.skip < t - 1:
            raise ValueError(f"skip must be in [0, {t - 1}); got {self.skip}")
        _, self.blocks = block_list(model)
        self.device = next(model.parameters()).device
        self.disk: Path | None = None
        if offload is None:
            self.store = self.device
        elif str(offload) == "cpu":
            self.store = torch.device("cpu")
        else:
            self.disk = Path(offload)
            self.disk.mkdir(parents=True, exist_ok=True)
            self.store = torch.device("cpu")
        self._keep = _logits_to_keep(model)
        self.block_out: list[list] = [[] for _ in batches]  # [batch][block] raw outputs
        self.p: list[torch.Tensor | None] = []
        self.const: list[float] = []  # sum over scored positions of sum_v p log p_orig
        self.structure: list = []  # per block: how to rebuild a tuple output read from disk
        handles = [blk.register_forward_hook(self._grab(i)) for i, blk in enumerate(self.blocks)]
        self._current = 0
        try:
            with torch.no_grad():
                for j, ids in enumerate(batches):
                    self._current = j
                    logp = self._logp(self._logits(model, ids))
                    p = logp.exp().to(torch.bfloat16)
                    self.const.append(float((p.to(logp.dtype) * logp).double().sum()))
                    p = p.to(self.store)
                    if self.disk is not None:
                        self._write(j, p)
                        p = None
                    self.p.append(p)
        finally:
            for h in handles:
                h.remove()

    # -- storage ----------------------------------------------------------------------------------
    def _grab(self, i):
        def hook(mod, args, out):
            self.block_out[self._current].append(_to_device(_detach(out), self.store))
        return hook

    def _write(self, j: int, p: torch.Tensor) -> None:
        from safetensors.torch import save_file

        tensors = {"p": p.contiguous()}
        structure = []
        for b, out in enumerate(self.block_out[j]):
            if isinstance(out, torch.Tensor):
                tensors[f"b{b}"] = out.contiguous()
                structure.append(None)
            else:  # a tuple: keep its tensors, remember where the None/other entries were
                kinds = []
                for k, o in enumerate(out):
                    if isinstance(o, torch.Tensor):
                        tensors[f"b{b}.{k}"] = o.contiguous()
                        kinds.append(True)
                    else:
                        kinds.append(None)
                structure.append(kinds)
        self.structure = structure
        tmp = self.disk / f".batch{j}.safetensors.tmp"
        save_file(tensors, str(tmp))
        os.replace(tmp, self._path(j))
        self.block_out[j] = []

    def _path(self, j: int) -> Path:
        return self.disk / f"batch{j}.safetensors"

    def _read(self, j: int, key: str) -> torch.Tensor:
        from safetensors import safe_open

        with safe_open(str(self._path(j)), framework="pt", device="cpu") as f:
            return f.get_tensor(key)

    def _cached_output(self, j: int, block: int):
        if self.disk is None:
            return _to_device(self.block_out[j][block], self.device)
        kinds = self.structure[block]
        if kinds is None:
            return self._read(j, f"b{block}").to(self.device)
        return tuple(self._read(j, f"b{block}.{k}").to(self.device) if kind else None
                     for k, kind in enumerate(kinds))

    def _reference(self, j: int) -> torch.Tensor:
        p = self._read(j, "p") if self.disk is not None else self.p[j]
        return p.to(self.device)

    # -- scoring ----------------------------------------------------------------------------------
    def _logits(self, model, ids: torch.Tensor) -> torch.Tensor:
        """Logits at positions >= skip, (B, T - skip, V); the head runs on those positions only."""
        ids = ids.to(self.device)
        t = ids.shape[1]
        if self._keep:
            return model(input_ids=ids, logits_to_keep=t - self.skip).logits
        return model(input_ids=ids).logits[:, self.skip :]

    def _logp(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(_wide(logits) / self.temperature, dim=-1)

    @contextlib.contextmanager
    def _replay(self, start_block: int, j: int) -> Iterator[None]:
        """Blocks < start_block return block (start_block - 1)'s cached output for batch j."""
        if start_block <= 0:
            yield
            return
        cached = self._cached_output(j, start_block - 1)
        patched = list(self.blocks)[:start_block]
        for blk in patched:
            blk.forward = lambda *a, _c=cached, **k: _c
        try:
            yield
        finally:
            for blk in patched:
                del blk.forward

    @torch.no_grad()
    def score(self, model, start_block: int = 0) -> float:
        """Mean KL per scored token (nats), over all search batches."""
        total, count = 0.0, 0
        for j, ids in enumerate(self.batches):
            with self._replay(start_block, j):
                logits = self._logits(model, ids)
            z = _wide(logits).div(self.temperature)
            p = self._reference(j)
            lse = torch.logsumexp(z, dim=-1)  # (B, T - skip)
            cross = (z.mul_(p)).sum(-1)  # sum_v p z / T  (z is overwritten)
            mass = p.sum(-1, dtype=torch.float32)
            if not (torch.isfinite(lse).all() and torch.isfinite(cross).all()):
                return math.inf
            total += self.const[j] - float(cross.double().sum()) + float((mass.double() * lse.double()).sum())
            count += lse.numel()
        return max(total / count, 0.0)


def _wide(x: torch.Tensor) -> torch.Tensor:
    """float32, or float64 when the model computes in float64."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _to_device(out, device):
    if isinstance(out, torch.Tensor):
        return out.to(device)
    if isinstance(out, tuple):
        return tuple(_to_device(o, device) for o in out)
    return out


def _logits_to_keep(model) -> bool:
    import inspect

    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover - exotic forward
        return False


def _key(tag: str, factors: dict[str, LayerFactors], scorer: KLScorer) -> str:
    h = hashlib.sha256(tag.encode())
    h.update(f"{scorer.temperature}:{scorer.skip}".encode())
    for name, f in factors.items():
        h.update(f"{name}:{float(f.s[:4].double().sum()):.8e}".encode())
    for ids in scorer.batches:
        h.update(ids.cpu().numpy().tobytes())
    return h.hexdigest()[:20]


def layer_sensitivities(
    model, factors: dict[str, LayerFactors], layers: list[TargetLayer], scorer: KLScorer, *,
    cache: str | os.PathLike | None = None, tag: str = "", progress=None,
) -> dict[str, float]:
    """``KL_l``: each layer alone replaced by its rank-floor(0.1 r_eq) factorization.

    With ``cache`` (a JSON path), finished layers are saved after each one and reused on rerun
    when the factorizations, search batches and settings match.
    """
    key = _key(tag, factors, scorer)
    done: dict[str, float] = {}
    if cache is not None and Path(cache).is_file():
        data = json.loads(Path(cache).read_text())
        if data.get("key") == key:
            done = {k: float(v) for k, v in data["kl"].items()}
    todo = [lay for lay in layers if lay.name not in done]
    it = progress.track(todo, total=len(todo), description="LEMS sensitivities") if progress else todo
    for lay in it:
        r_ref = max(1, math.floor(0.1 * lay.r_eq))
        w = factors[lay.name].weight(r_ref)
        with swapped_weights(model, {lay.name: w}):
            done[lay.name] = scorer.score(model, start_block=max(lay.block, 0))
        if cache is not None:
            atomic_write_json(cache, {"key": key, "kl": done})
    return {lay.name: done[lay.name] for lay in layers}


@dataclass
class SearchResult:
    """The chosen ``ranks`` ({name: rank or None for dense}), the best (alpha, gamma), and every
    trial as dicts: alpha, gamma, kl (measured, or None), surrogate (sum of err_l(r_l), no depth
    bias), objective (ILP value), kept (achieved fraction)."""

    ranks: dict[str, int | None]
    alpha: float
    gamma: float
    trials: list[dict] = field(default_factory=list)
    kls: dict[str, float] = field(default_factory=dict)


def solve_lems(layers, factors, kls, n_blocks, alpha, gamma, target, multiple):
    mult = depth_multiplier(n_blocks, alpha, gamma)
    opts = [layer_options(lay, factors[lay.name].s.double().cpu().numpy(), kls[lay.name],
                          float(mult[max(lay.block, 0)]), target, multiple=multiple)
            for lay in layers]
    dense = sum(lay.params for lay in layers)
    picks = solve_knapsack(opts, target * dense)
    ranks = {lay.name: (None if o.ranks[p] < 0 else int(o.ranks[p]))
             for lay, o, p in zip(layers, opts, picks, strict=True)}
    objective = float(sum(o.error[p] for o, p in zip(opts, picks, strict=True)))
    surrogate = float(sum(o.error[p] / float(mult[max(lay.block, 0)])
                          for lay, o, p in zip(layers, opts, picks, strict=True)))
    kept = float(sum(o.cost[p] for o, p in zip(opts, picks, strict=True)) / dense)
    return ranks, objective, surrogate, kept


def lems_search(
    model, factors: dict[str, LayerFactors], layers: list[TargetLayer], kls: dict[str, float],
    target: float, *, scorer: KLScorer | None = None, trials: int = 10, seed: int = 42,
    alpha_range: tuple[float, float] = (0.0, 3.0), gamma_range: tuple[float, float] = (0.0, 7.0),
    default: tuple[float, float] = (0.0, 5.0), multiple: int = 8,
    n_startup_trials: int | None = None, progress=None,
) -> SearchResult:
    """Solve the knapsack; with ``trials > 0`` search (alpha, gamma) by Optuna TPE (``seed``),
    each trial scored by the KL of the model with all chosen ranks applied; the best trial wins.
    ``trials == 0`` solves once at ``default`` = (alpha 0, gamma 5).

    ``n_startup_trials``: TPE's random start-up trials before it models anything (None: Optuna's
    default, 10 -- with the paper's 10 trials the search is then pure random sampling)."""
    if trials < 0:
        raise ValueError(f"trials must be >= 0; got {trials}")
    if n_startup_trials is not None and n_startup_trials < 0:
        raise ValueError(f"n_startup_trials must be >= 0 (or None); got {n_startup_trials}")
    n_blocks = len(block_list(model)[1])
    if trials <= 0:
        ranks, obj, sur, kept = solve_lems(layers, factors, kls, n_blocks, *default, target, multiple)
        return SearchResult(ranks, *default, [dict(alpha=default[0], gamma=default[1], kl=None,
                                                   surrogate=sur, objective=obj, kept=kept)], kls)
    if scorer is None:
        raise ValueError("lems_search with trials > 0 needs a KLScorer on the search batches")
    try:
        import optuna
    except ImportError as exc:  # pragma: no cover - optuna is a dependency
        raise ImportError("LEMS's outer search needs optuna: pip install 'optuna==5.0.0'") from exc
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    start = min(max(lay.block, 0) for lay in layers)
    log: list[dict] = []
    found: dict[int, dict] = {}
    tick = progress.task("LEMS search (Optuna)", total=trials) if progress else (lambda n=1: None)

    def objective(trial) -> float:
        alpha = trial.suggest_float("alpha", *alpha_range)
        gamma = trial.suggest_float("gamma", *gamma_range)
        ranks, obj, sur, kept = solve_lems(layers, factors, kls, n_blocks, alpha, gamma, target, multiple)
        weights = {n: factors[n].weight(r) for n, r in ranks.items() if r is not None}
        with swapped_weights(model, weights):
            kl = scorer.score(model, start_block=start)
        log.append(dict(alpha=alpha, gamma=gamma, kl=kl, surrogate=sur, objective=obj, kept=kept))
        found[trial.number] = ranks
        tick(1)
        return kl

    startup = {} if n_startup_trials is None else {"n_startup_trials": n_startup_trials}
    study = optuna.create_study(direction="minimize",
                                sampler=optuna.samplers.TPESampler(seed=seed, **startup))
    study.optimize(objective, n_trials=trials)
    best = study.best_trial
    return SearchResult(found[best.number], best.params["alpha"], best.params["gamma"], log, kls)


def ranks_summary(layers: list[TargetLayer], ranks: dict[str, int | None]) -> np.ndarray:
    """Kept fraction per (block, module kind) for heat maps: array (n_blocks, kinds) + kinds."""
    kinds = sorted({lay.name.rsplit(".", 1)[-1] for lay in layers})
    blocks = sorted({lay.block for lay in layers})
    grid = np.full((len(blocks), len(kinds)), np.nan)
    for lay in layers:
        r = ranks.get(lay.name)
        c = 1.0 if r is None else r * (lay.n_in + lay.n_out) / lay.params
        grid[blocks.index(lay.block), kinds.index(lay.name.rsplit(".", 1)[-1])] = c
    return grid, blocks, kinds
