"""Output-length predictors on prompt features: TIE's distribution heads and the point baselines.

TIE (official code): a frozen-or-finetuned encoder pools each prompt into ``[CLS/last, masked mean,
masked max]`` (3h), and two independent heads ``3h -> 256 -> 256 -> 128 -> 1`` (LayerNorm, GELU,
dropout 0.2 / 0.2 / 0.1) regress ``z(mu)`` and ``z(log1p sigma)`` of the prompt's fitted log-t;
predictions are de-standardised and ``sigma`` clamped to >= 1e-6. Here the encoder is frozen (the
paper's second stage) and exchangeable: :func:`encode_prompts` pools any HF causal LM's last
hidden states (default SmolLM2, no DeBERTa offline), or callers pass their own feature matrix.

Baselines on the same features and data: :class:`SSJFPredictor` (one head on log mean length, as a
proxy-model point predictor) and :class:`LTRRanker` (one head trained with ListMLE to rank prompts
by their observed length).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

__all__ = ["HeadConfig", "make_head", "LengthPredictor", "SSJFPredictor", "LTRRanker", "encode_prompts"]


@dataclass(frozen=True)
class HeadConfig:
    """Training settings of a head (full-batch or minibatch Adam on standardised targets)."""

    epochs: int = 300
    lr: float = 1e-3
    weight_decay: float = 1e-4
    batch_size: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or not self.lr > 0:
            raise ValueError(f"epochs, batch_size must be >= 1 and lr > 0; got {self}")


def make_head(in_dim: int) -> nn.Sequential:
    """The official head: in -> 256 -> 256 -> 128 -> 1."""
    return nn.Sequential(
        nn.Linear(in_dim, 256), nn.LayerNorm(256), nn.GELU(), nn.Dropout(0.2),
        nn.Linear(256, 256), nn.LayerNorm(256), nn.GELU(), nn.Dropout(0.2),
        nn.Linear(256, 128), nn.GELU(), nn.Dropout(0.1),
        nn.Linear(128, 1))


def _as_x(features) -> torch.Tensor:
    x = torch.as_tensor(np.asarray(features, dtype=np.float32))
    if x.ndim != 2:
        raise ValueError(f"features must be a 2-D array (n_prompts, dim); got shape {tuple(x.shape)}")
    return x


class _Base:
    def __init__(self, config: HeadConfig = HeadConfig()):
        self.config = config
        self.x_mean_ = self.x_std_ = None

    def _prep(self, features, fit=False):
        x = _as_x(features)
        if fit:
            self.x_mean_, self.x_std_ = x.mean(0), x.std(0).clamp(min=1e-6)
        elif self.x_mean_ is None:
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit() first")
        elif x.shape[1] != self.x_mean_.numel():
            raise ValueError(f"features have dim {x.shape[1]}; the predictor was fitted on {self.x_mean_.numel()} "
                             "(a checkpoint from another encoder?)")
        return (x - self.x_mean_) / self.x_std_

    def _train(self, head, x, loss_fn):
        cfg = self.config
        g = torch.Generator().manual_seed(cfg.seed)
        opt = torch.optim.AdamW(head.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        head.train()
        n = x.shape[0]
        for _ in range(cfg.epochs):
            perm = torch.randperm(n, generator=g)
            for i in range(0, n, cfg.batch_size):
                idx = perm[i: i + cfg.batch_size]
                loss = loss_fn(head, idx)
                opt.zero_grad()
                loss.backward()
                opt.step()
        head.eval()
        return head

    @staticmethod
    def _out(head, x):
        with torch.no_grad():
            return head(x).squeeze(-1).double().numpy()


class LengthPredictor(_Base):
    """Predicts the per-prompt log-t ``(mu, sigma)``; ``fit(features, mu, sigma)``, ``predict``."""

    def fit(self, features, mu, sigma) -> LengthPredictor:
        x = self._prep(features, fit=True)
        mu = torch.as_tensor(np.asarray(mu, np.float32))
        ls = torch.log1p(torch.as_tensor(np.asarray(sigma, np.float32)))
        if mu.shape != (x.shape[0],) or ls.shape != mu.shape:
            raise ValueError(f"mu and sigma must have shape ({x.shape[0]},)")
        if not torch.all(ls > 0):
            raise ValueError("sigma labels must be > 0")
        self.t_stats_ = [(float(t.mean()), float(t.std().clamp(min=1e-6))) for t in (mu, ls)]
        torch.manual_seed(self.config.seed)
        self.heads_ = []
        for t, (m, s) in zip((mu, ls), self.t_stats_, strict=True):
            z = (t - m) / s
            head = make_head(x.shape[1])
            self.heads_.append(self._train(head, x, lambda h, idx, z=z: ((h(x[idx]).squeeze(-1) - z[idx]) ** 2).mean()))
        return self

    def predict(self, features) -> tuple[np.ndarray, np.ndarray]:
        """``(mu, sigma)`` float64 arrays of shape (n,)."""
        x = self._prep(features)
        (mm, ms), (sm, ss) = self.t_stats_
        mu = self._out(self.heads_[0], x) * ms + mm
        sigma = np.expm1(self._out(self.heads_[1], x) * ss + sm)
        return mu, np.maximum(sigma, 1e-6)

    def save(self, path: str | os.PathLike) -> None:
        from safetensors.torch import save_file

        state = {f"head{i}.{k}": v for i, h in enumerate(self.heads_) for k, v in h.state_dict().items()}
        state |= {"x_mean": self.x_mean_, "x_std": self.x_std_, "t_stats": torch.tensor(self.t_stats_)}
        save_file(state, str(path))

    @classmethod
    def load(cls, path: str | os.PathLike) -> LengthPredictor:
        from safetensors.torch import load_file

        st = load_file(str(path))
        self = cls()
        self.x_mean_, self.x_std_ = st["x_mean"], st["x_std"]
        self.t_stats_ = [tuple(r) for r in st["t_stats"].tolist()]
        self.heads_ = []
        for i in range(2):
            h = make_head(self.x_mean_.numel())
            h.load_state_dict({k.split(".", 1)[1]: v for k, v in st.items() if k.startswith(f"head{i}.")})
            self.heads_.append(h.eval())
        return self


class SSJFPredictor(_Base):
    """Point predictor of the mean output length (regresses log of the per-prompt mean)."""

    def fit(self, features, mean_length) -> SSJFPredictor:
        x = self._prep(features, fit=True)
        y = torch.log(torch.as_tensor(np.asarray(mean_length, np.float32)))
        self.t_ = (float(y.mean()), float(y.std().clamp(min=1e-6)))
        z = (y - self.t_[0]) / self.t_[1]
        torch.manual_seed(self.config.seed)
        self.head_ = self._train(make_head(x.shape[1]), x, lambda h, idx: ((h(x[idx]).squeeze(-1) - z[idx]) ** 2).mean())
        return self

    def predict(self, features) -> np.ndarray:
        """Predicted lengths in tokens, float64 (n,)."""
        x = self._prep(features)
        return np.exp(self._out(self.head_, x) * self.t_[1] + self.t_[0])


def listmle_loss(scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """ListMLE for one list: -log P(order of ``target`` ascending | Plackett-Luce on -scores).

    Lower score = shorter = served first; ``scores``, ``target``: (n,).
    """
    order = torch.argsort(target)
    s = -scores[order]
    # log sum_{j >= i} exp(s_j), by a reversed cumulative logsumexp
    rev = torch.logcumsumexp(s.flip(0), 0).flip(0)
    return (rev - s).sum()


class LTRRanker(_Base):
    """Learning-to-rank baseline: a head trained with ListMLE on lists of ``list_size`` prompts."""

    def __init__(self, config: HeadConfig = HeadConfig(), list_size: int = 32):
        super().__init__(config)
        if list_size < 2:
            raise ValueError(f"list_size must be >= 2; got {list_size}")
        self.list_size = list_size

    def fit(self, features, length) -> LTRRanker:
        x = self._prep(features, fit=True)
        y = torch.as_tensor(np.asarray(length, np.float32))
        torch.manual_seed(self.config.seed)

        def loss(h, idx):
            s = h(x[idx]).squeeze(-1)
            parts = [listmle_loss(s[i: i + self.list_size], y[idx][i: i + self.list_size])
                     for i in range(0, len(idx), self.list_size)]
            return torch.stack(parts).sum() / len(idx)
        self.head_ = self._train(make_head(x.shape[1]), x, loss)
        return self

    def predict(self, features) -> np.ndarray:
        """Ranking scores (lower = predicted shorter), float64 (n,)."""
        x = self._prep(features)
        return self._out(self.head_, x)


def encode_prompts(texts: list[str], model=None, tokenizer=None, max_len: int = 512, batch_size: int = 8,
                   device: str = "cpu", progress=None) -> np.ndarray:
    """Pooled frozen-encoder features ``[last token, masked mean, masked max]`` of the final hidden
    states, float32 (n, 3h). ``model``/``tokenizer`` default to the packaged SmolLM2 (dtype policy: bf16 only where native)."""
    if model is None:
        from icml26.core.lm import load_lm

        model, tokenizer = load_lm(None, dtype=None, device=device)
    tokenizer.padding_side = "right"
    out = []
    it = range(0, len(texts), batch_size)
    it = progress.track(it, total=math.ceil(len(texts) / batch_size), description="encoding prompts") if progress else it
    with torch.inference_mode():
        for i in it:
            enc = tokenizer(texts[i: i + batch_size], return_tensors="pt", padding=True, truncation=True,
                            max_length=max_len).to(device)
            h = model(**enc, output_hidden_states=True).hidden_states[-1].float()
            m = enc["attention_mask"].unsqueeze(-1).float()
            last = h[torch.arange(h.shape[0]), enc["attention_mask"].sum(1) - 1]
            mean = (h * m).sum(1) / m.sum(1)
            mx = h.masked_fill(m == 0, -1e9).max(1).values
            out.append(torch.cat([last, mean, mx], -1).cpu())
    return torch.cat(out).numpy()
