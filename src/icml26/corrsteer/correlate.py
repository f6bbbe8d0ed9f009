"""Stage 1 of CorrSteer: Pearson correlation of pooled generation-time activations with reward.

:class:`CorrelationAccumulator` keeps float64 running sums per feature (O(d) memory) and merges
across workers by addition (when they share ``shift``). :func:`collect` runs generation with
forward pre-hooks that read the residual entering chosen blocks at the *last position of each
forward call* (the last prompt token at prefill, then each new token under the KV cache), pools
it over the generated tokens up to EOS, scores completions with a reward function, and feeds the
accumulators.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from icml26.core.errors import UserError
from icml26.corrsteer.train import blocks, check_layers

__all__ = ["CorrelationAccumulator", "collect", "Collected", "pool_steps", "check_rewards"]


class CorrelationAccumulator:
    """Running float64 sums for the Pearson correlation of ``d`` features with a reward.

    Sums are of ``x - shift`` (``shift`` per feature, taken from the first row seen unless given),
    which keeps constant or far-offset features exact: a constant feature has r = 0, never NaN.
    Workers that share ``shift`` merge by plain addition of the sums (an all-reduce).

    Attributes: ``n``; ``sx, sxx, sxy`` ``(d,)``; ``sy, syy``; ``n_pos``, ``sx_pos``,
    ``nact_pos``, ``sact_pos`` (on samples with reward > ``positive``: count, sum of raw x,
    count of x > 0, sum of x where > 0) for the steering coefficients.
    """

    def __init__(self, d: int, shift: np.ndarray | None = None, positive: float = 0.5) -> None:
        if d < 1:
            raise ValueError(f"d must be >= 1; got {d}")
        self.d, self.positive = d, positive
        self.shift = None if shift is None else np.asarray(shift, np.float64).reshape(d).copy()
        z = lambda: np.zeros(d, np.float64)  # noqa: E731
        self.sx, self.sxx, self.sxy = z(), z(), z()
        self.sx_pos, self.nact_pos, self.sact_pos = z(), z(), z()
        self.n = self.n_pos = 0
        self.sy = self.syy = 0.0

    def update(self, x, y) -> CorrelationAccumulator:
        """Add samples: ``x`` ``(n, d)`` activations, ``y`` ``(n,)`` rewards."""
        x = np.asarray(x.detach().float().cpu() if isinstance(x, torch.Tensor) else x, np.float64)
        y = np.asarray(y.detach().float().cpu() if isinstance(y, torch.Tensor) else y, np.float64).reshape(-1)
        if x.ndim != 2 or x.shape[1] != self.d or x.shape[0] != y.shape[0]:
            raise ValueError(f"update needs x (n, {self.d}) and y (n,); got {x.shape}, {y.shape}")
        if not (np.isfinite(x).all() and np.isfinite(y).all()):
            raise ValueError("activations and rewards must be finite")
        if x.shape[0] == 0:
            return self
        if self.shift is None:
            self.shift = x[0].copy()
        xc = x - self.shift
        self.n += x.shape[0]
        self.sx += xc.sum(0)
        self.sxx += (xc * xc).sum(0)
        self.sxy += xc.T @ y
        self.sy += float(y.sum())
        self.syy += float((y * y).sum())
        pos = y > self.positive
        self.n_pos += int(pos.sum())
        xp = x[pos]
        self.sx_pos += xp.sum(0)
        self.nact_pos += (xp > 0).sum(0)
        self.sact_pos += np.where(xp > 0, xp, 0).sum(0)
        return self

    def merge(self, other: CorrelationAccumulator) -> CorrelationAccumulator:
        """Add ``other``'s samples into ``self`` (shifts may differ; they are reconciled)."""
        if other.d != self.d:
            raise ValueError(f"cannot merge accumulators of d={self.d} and d={other.d}")
        if other.n == 0:
            return self
        if self.shift is None:
            self.shift = other.shift.copy()
        delta = other.shift - self.shift  # other's x - shift_self = (x - shift_other) + delta
        sx = other.sx + other.n * delta
        self.sxx += other.sxx + 2 * delta * other.sx + other.n * delta**2
        self.sxy += other.sxy + delta * other.sy
        self.sx += sx
        self.n += other.n
        self.sy += other.sy
        self.syy += other.syy
        self.n_pos += other.n_pos
        self.sx_pos += other.sx_pos
        self.nact_pos += other.nact_pos
        self.sact_pos += other.sact_pos
        return self

    def corr(self) -> np.ndarray:
        """Pearson r per feature ``(d,)`` float64; 0 where x or y has no variance."""
        if self.n < 2:
            raise UserError(f"need at least 2 samples to correlate; have {self.n}")
        n = self.n
        num = n * self.sxy - self.sx * self.sy
        vx = np.maximum(n * self.sxx - self.sx**2, 0.0)
        vy = max(n * self.syy - self.sy**2, 0.0)
        den = np.sqrt(vx * vy)
        # Treat variance at rounding level (relative to the second moment) as none.
        tiny = vx <= 1e-12 * n * self.sxx
        out = np.divide(num, den, out=np.zeros(self.d), where=(den > 0) & ~tiny)
        return np.clip(out, -1.0, 1.0)

    def coefficients(self, mode: str = "mean") -> np.ndarray:
        """Steering coefficient per feature ``(d,)``: the mean activation over positive-reward
        samples (``"mean"``), or over those where the feature is active (``"real"``)."""
        if mode == "mean":
            return self.sx_pos / max(self.n_pos, 1)
        if mode == "real":
            return np.divide(self.sact_pos, self.nact_pos, out=np.zeros(self.d), where=self.nact_pos > 0)
        raise UserError(f"coefficient mode must be 'mean' or 'real'; got {mode!r}")

    def state(self) -> dict[str, np.ndarray]:
        """The sums as arrays (for an all-reduce or saving)."""
        return {k: np.asarray(getattr(self, k)) for k in
                ("shift", "sx", "sxx", "sxy", "sx_pos", "nact_pos", "sact_pos", "n", "n_pos", "sy", "syy")}


def check_rewards(y) -> None:
    """Error when every training reward is equal (no correlation is defined)."""
    y = np.asarray(y, np.float64)
    if y.size == 0:
        raise UserError("the training split is empty")
    if np.all(y == y.flat[0]):
        raise UserError(
            f"all {y.size} training rewards are {y.flat[0]:g} (base accuracy {float(y.mean()):.3f}): "
            "nothing to correlate; pick a task where the model is sometimes right and sometimes wrong"
        )


def pool_steps(steps: torch.Tensor, mask: torch.Tensor, how: str = "max") -> torch.Tensor:
    """Pool ``steps`` ``(S, B, d)`` over the steps where ``mask`` ``(S, B)`` is true -> ``(B, d)``
    (rows without a valid step give zeros)."""
    if how not in ("max", "mean"):
        raise UserError(f"pool must be 'max' or 'mean'; got {how!r}")
    m = mask.to(steps.device)[..., None]
    if how == "max":
        filled = torch.where(m, steps, torch.full_like(steps, -torch.inf)).amax(0)
        return torch.where(torch.isfinite(filled), filled, torch.zeros_like(filled))
    return (steps * m).sum(0) / m.sum(0).clamp_min(1)


@dataclass
class Collected:
    """What :func:`collect` returns: accumulators per layer, rewards, completions, pooled codes
    (only when ``keep=True``; ``{layer: (n, d) float32}``)."""

    accumulators: dict[int, CorrelationAccumulator]
    rewards: np.ndarray
    completions: list[str]
    pooled: dict[int, torch.Tensor] | None
    hook_calls: int


@torch.no_grad()
def collect(model, tok, saes: dict, prompts: Sequence[str], reward_fn: Callable[[int, str], float],
            *, max_new_tokens: int = 16, pool: str = "max", raw: bool = False, batch_size: int = 8,
            keep: bool = False, progress=None) -> Collected:
    """Generate greedily for every prompt and correlate pooled activations with rewards.

    ``saes``: ``{layer: SAE}``; ``raw=True`` (or ``None`` values) correlates residual dims instead.
    ``reward_fn(i, completion)`` scores prompt ``i``'s completion. Pooling covers the forward that
    produced each generated token up to and including EOS (the prefill's last position, then the
    forwards over generated tokens); rows that finished early are masked, padding never counts.
    """
    layers = check_layers(model, saes.keys())
    if raw:
        saes = {L: None for L in layers}
    mods = blocks(model)
    steps: dict[int, list[torch.Tensor]] = {L: [] for L in layers}
    calls = [0]

    def make(L):
        def hook(module, args, kwargs):
            h = args[0] if args else kwargs["hidden_states"]
            calls[0] += 1
            last = h[:, -1].float()
            steps[L].append(last if saes[L] is None else saes[L].encode(last).float())
        return hook

    side = tok.padding_side
    tok.padding_side = "left"
    device = next(model.parameters()).device
    accs, rewards, comps, kept = {}, [], [], {L: [] for L in layers}
    handles = [mods[L].register_forward_pre_hook(make(L), with_kwargs=True) for L in layers]
    chunks = [list(range(i, min(i + batch_size, len(prompts)))) for i in range(0, len(prompts), batch_size)]
    it = chunks if progress is None else progress.track(chunks, len(chunks), "collect")
    try:
        for idx in it:
            for L in layers:
                steps[L].clear()
            enc = tok([prompts[i] for i in idx], return_tensors="pt", padding=True).to(device)
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                 pad_token_id=tok.pad_token_id)
            gen = out[:, enc["input_ids"].shape[1]:].cpu()
            n_steps = len(steps[layers[0]])
            # Step t (t >= 0) is the forward whose output is generated token t; valid through EOS.
            eos = tok.eos_token_id
            valid = torch.ones(gen.shape, dtype=torch.bool)
            if eos is not None:
                hit = (gen == eos).int().cumsum(1)
                valid = (hit - (gen == eos).int()) == 0  # up to and including the first EOS
            mask = valid[:, :n_steps].T  # (S, B)
            for b, i in enumerate(idx):
                text = tok.decode(gen[b][valid[b]], skip_special_tokens=True)
                comps.append(text)
                rewards.append(float(reward_fn(i, text)))
            y = np.array(rewards[-len(idx):])
            for L in layers:
                st = torch.stack(steps[L][:mask.shape[0]])  # (S, B, d)
                pooled = pool_steps(st, mask, pool).cpu()
                if L not in accs:
                    accs[L] = CorrelationAccumulator(pooled.shape[1])
                accs[L].update(pooled, y)
                if keep:
                    kept[L].append(pooled)
    finally:
        for h in handles:
            h.remove()
        tok.padding_side = side
    return Collected(accs, np.array(rewards), comps,
                     {L: torch.cat(v) for L, v in kept.items()} if keep else None, calls[0])
