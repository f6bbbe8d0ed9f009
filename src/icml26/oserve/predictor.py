"""Next-minute arrival rate per request type.

:class:`TypeRatePredictor` is the paper's predictor: one LSTM per type on that type's per-minute
arrival counts, looking back ``lookback`` (50) minutes, predicting the next minute's count.
Baselines: :class:`MovingAverage` (mean of the last ``window`` minutes) and
:class:`AggregateLSTM` (one LSTM on the total count, split by the recent type shares).
:func:`rrmse` = RMSE / mean of the truth. Counts are ``(T, K)`` arrays (per minute, per type).
"""

from __future__ import annotations

import numpy as np

__all__ = ["TypeRatePredictor", "MovingAverage", "AggregateLSTM", "rrmse", "synthetic_counts"]


def rrmse(pred, truth) -> float:
    """Relative RMSE: sqrt(mean((pred - truth)^2)) / mean(truth), over all entries."""
    pred, truth = np.asarray(pred, float), np.asarray(truth, float)
    return float(np.sqrt(((pred - truth) ** 2).mean()) / truth.mean())


def synthetic_counts(minutes: int, weights, rate_per_min: float, seed: int = 0, amplitude: float = 0.5,
                     period_min: float = 1440.0, burst_shape: float = 20.0) -> np.ndarray:
    """(minutes, K) int64 Poisson counts: type j's rate is ``rate * w_j * (1 + A sin(2 pi t / P +
    2 pi j / K))`` times a slowly varying Gamma(shape, 1/shape) burst factor (AR(1) smoothed)."""
    rng = np.random.default_rng(seed)
    w = np.asarray(weights, float) / np.sum(weights)
    K = len(w)
    t = np.arange(minutes)[:, None]
    diurnal = 1 + amplitude * np.sin(2 * np.pi * (t / period_min + np.arange(K)[None] / K))
    g = rng.gamma(burst_shape, 1 / burst_shape, (minutes, K))
    burst = np.empty_like(g)
    burst[0] = g[0]
    for i in range(1, minutes):
        burst[i] = 0.8 * burst[i - 1] + 0.2 * g[i]
    return rng.poisson(rate_per_min * w[None] * diurnal * burst).astype(np.int64)


def _check_series(counts, lookback):
    c = np.asarray(counts, dtype=float)
    if c.ndim != 2:
        raise ValueError(f"counts must be (minutes, types); got shape {c.shape}")
    if not np.isfinite(c).all():
        raise ValueError("counts contain NaN or inf")
    if lookback >= len(c):
        raise ValueError(f"lookback ({lookback}) must be < the series length ({len(c)} minutes)")
    return c


class _LSTMs:
    """``m`` independent one-layer LSTMs (batched as groups) mapping a window to the next value."""

    def __init__(self, m, lookback, hidden, device, seed):
        import torch

        torch.manual_seed(seed)
        self.lstm = [torch.nn.LSTM(1, hidden, batch_first=True).to(device) for _ in range(m)]
        self.head = [torch.nn.Linear(hidden, 1).to(device) for _ in range(m)]
        self.lookback, self.device = lookback, device

    def fit(self, series, epochs, lr=3e-3, batch=256, seed=0):
        import torch

        rng = np.random.default_rng(seed)
        self.scale = series.mean(0) + 1e-6  # (m,) per-series normalisation
        s = series / self.scale
        L = self.lookback
        for i in range(s.shape[1]):
            X = np.lib.stride_tricks.sliding_window_view(s[:-1, i], L)  # (N, L)
            y = s[L:, i]
            params = list(self.lstm[i].parameters()) + list(self.head[i].parameters())
            opt = torch.optim.Adam(params, lr=lr)
            for _ in range(epochs):
                for idx in np.array_split(rng.permutation(len(X)), max(1, len(X) // batch)):
                    xb = torch.tensor(X[idx], dtype=torch.float32, device=self.device)[..., None]
                    yb = torch.tensor(y[idx], dtype=torch.float32, device=self.device)
                    out, _ = self.lstm[i](xb)
                    loss = ((self.head[i](out[:, -1]).squeeze(-1) - yb) ** 2).mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
        return self

    def predict(self, series):
        """(T - lookback, m): prediction for minute t from minutes t-L..t-1."""
        import torch

        s = series / self.scale
        out = []
        with torch.no_grad():
            for i in range(s.shape[1]):
                X = np.lib.stride_tricks.sliding_window_view(s[:-1, i], self.lookback)
                xb = torch.tensor(X, dtype=torch.float32, device=self.device)[..., None]
                h, _ = self.lstm[i](xb)
                out.append(self.head[i](h[:, -1]).squeeze(-1).cpu().numpy() * self.scale[i])
        return np.maximum(np.stack(out, 1), 0.0)


class TypeRatePredictor:
    """One LSTM per type (paper: look-back 50 minutes). ``fit(counts)`` then ``predict(counts)``
    returns ``(T - lookback, K)`` predicted counts for minutes ``lookback .. T-1``."""

    def __init__(self, k: int, lookback: int = 50, hidden: int = 64, device: str = "cpu",
                 epochs: int = 5, seed: int = 0, batch: int = 64, lr: float = 3e-3):
        if k < 1:
            raise ValueError(f"k must be >= 1; got {k}")
        if lookback < 1 or hidden < 1 or epochs < 1:
            raise ValueError(f"lookback, hidden and epochs must be >= 1; got {lookback}, {hidden}, {epochs}")
        self.k, self.lookback, self.hidden, self.device, self.epochs, self.seed = k, lookback, hidden, device, epochs, seed
        self.batch, self.lr = batch, lr

    def fit(self, counts) -> TypeRatePredictor:
        c = _check_series(counts, self.lookback)
        if c.shape[1] != self.k:
            raise ValueError(f"counts have {c.shape[1]} types; predictor has k={self.k}")
        self.net_ = _LSTMs(self.k, self.lookback, self.hidden, self.device, self.seed).fit(c, self.epochs, self.lr, self.batch, self.seed)
        return self

    def predict(self, counts) -> np.ndarray:
        return self.net_.predict(_check_series(counts, self.lookback))


class AggregateLSTM(TypeRatePredictor):
    """One LSTM on the total count; per-type = total x the type shares of the look-back window."""

    def fit(self, counts):
        c = _check_series(counts, self.lookback)
        self.net_ = _LSTMs(1, self.lookback, self.hidden, self.device, self.seed).fit(c.sum(1, keepdims=True),
                                                                                   self.epochs, self.lr, self.batch, self.seed)
        return self

    def predict(self, counts):
        c = _check_series(counts, self.lookback)
        tot = self.net_.predict(c.sum(1, keepdims=True))  # (T-L, 1)
        win = np.lib.stride_tricks.sliding_window_view(c[:-1], self.lookback, axis=0).sum(-1)  # (T-L, K)
        share = win / np.maximum(win.sum(1, keepdims=True), 1e-9)
        return tot * share


class MovingAverage:
    """Mean of the last ``window`` minutes, per type."""

    def __init__(self, window: int = 50):
        if window < 1:
            raise ValueError(f"window must be >= 1; got {window}")
        self.lookback = window

    def fit(self, counts):
        return self

    def predict(self, counts):
        c = _check_series(counts, self.lookback)
        return np.lib.stride_tricks.sliding_window_view(c[:-1], self.lookback, axis=0).mean(-1)
