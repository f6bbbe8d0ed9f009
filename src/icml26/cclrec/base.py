"""The shared estimator frame: fit loop with early stopping, scoring, top-K, save/load.

Every recommender here scores ``user_emb[u] @ item_emb.T``; after ``fit`` the final (propagated)
embeddings are cached as ``user_emb_`` (U, d) and ``item_emb_`` (I, d) float32, which is what
``save`` writes (safetensors + JSON) and :class:`SavedRecommender` serves.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from icml26.cclrec.metrics import evaluate, topk_masked
from icml26.core.errors import UserError
from icml26.core.io import atomic_dir

__all__ = ["Recommender", "SavedRecommender", "load"]


class _Scoring:
    """Scoring and top-K over cached embeddings; needs ``user_emb_``, ``item_emb_``, ``train_``."""

    user_emb_: torch.Tensor
    item_emb_: torch.Tensor
    train_: sp.csr_matrix

    def score(self, users) -> torch.Tensor:
        """Scores (B, I) float32 for dense user indices ``users`` (B,)."""
        u = torch.as_tensor(np.asarray(users), dtype=torch.long, device=self.user_emb_.device)
        return self.user_emb_[u] @ self.item_emb_.T

    def recommend(self, users, k: int = 20, exclude_seen: bool = True) -> np.ndarray:
        """Top-``k`` item indices (B, k) int64, best first; training items excluded by default."""
        users = np.asarray(users, dtype=np.int64)
        n_users, n_items = self.train_.shape
        bad = users[(users < 0) | (users >= n_users)]
        if bad.size:
            raise UserError(f"unknown users (dense index) {bad[:5].tolist()}; there are {n_users}")
        if not 1 <= k <= n_items:
            raise UserError(f"k must be in [1, {n_items}] (the number of items); got {k}")
        tr = self.train_
        masks = [
            tr.indices[tr.indptr[u] : tr.indptr[u + 1]] if exclude_seen else np.zeros(0, int)
            for u in users
        ]
        if exclude_seen and min((n_items - len(m) for m in masks), default=k) < k:
            raise UserError(f"k={k} exceeds the unseen items of some user; lower k")
        with torch.no_grad():
            return topk_masked(self.score(users).float().cpu(), masks, k).numpy()

    def evaluate(self, target: sp.csr_matrix, exclude=None, ks=(10, 20, 50), per_user=False):
        """Full-ranking metrics on ``target``; ``exclude`` defaults to the training matrix."""
        ex = [self.train_] if exclude is None else exclude
        return evaluate(lambda u: self.score(u).cpu(), target, ex, ks, per_user=per_user)

    def save(self, path: str | os.PathLike, extra: dict | None = None) -> Path:
        """Write ``model.safetensors`` (embeddings, train CSR) and ``config.json`` atomically."""
        from safetensors.torch import save_file

        path = Path(path)
        tr = self.train_
        tensors = {
            "user_emb": self.user_emb_.detach().float().cpu().contiguous(),
            "item_emb": self.item_emb_.detach().float().cpu().contiguous(),
            "train_indptr": torch.from_numpy(tr.indptr.astype(np.int64)),
            "train_indices": torch.from_numpy(tr.indices.astype(np.int64)),
        }
        cfg = {
            "format": "icml26.cclrec/1",
            "model": getattr(self, "name", "saved"),
            "shape": list(tr.shape),
            **(extra or {}),
        }
        with atomic_dir(path) as tmp:
            save_file(tensors, str(tmp / "model.safetensors"))
            (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
        return path


class SavedRecommender(_Scoring):
    """A fitted model read back by :func:`load`: serves ``score``/``recommend``/``evaluate``."""

    def __init__(self, user_emb, item_emb, train, config):
        self.user_emb_, self.item_emb_, self.train_, self.config = user_emb, item_emb, train, config
        self.name = config.get("model", "saved")


def load(path: str | os.PathLike, device: str = "cpu") -> SavedRecommender:
    """Read a folder written by ``save``."""
    from safetensors.torch import load_file

    path = Path(path)
    if not (path / "model.safetensors").is_file() or not (path / "config.json").is_file():
        raise UserError(f"{path}: not a saved cclrec model (model.safetensors + config.json)")
    cfg = json.loads((path / "config.json").read_text(encoding="utf-8"))
    t = load_file(str(path / "model.safetensors"))
    n_u, n_i = cfg["shape"]
    indptr, indices = t["train_indptr"].numpy(), t["train_indices"].numpy()
    train = sp.csr_matrix((np.ones(len(indices), np.float32), indices, indptr), shape=(n_u, n_i))
    return SavedRecommender(t["user_emb"].to(device), t["item_emb"].to(device), train, cfg)


class Recommender(_Scoring):
    """Base estimator. Subclasses implement ``_setup``, ``_batches``, ``_loss``, ``_embeddings``.

    ``fit`` runs passes (one pass = about one training interaction per BPR triplet), evaluates
    validation NDCG@``eval_k`` after every pass, stops after ``patience`` passes without gain
    and restores the best parameters. ``history_`` holds (pass, val NDCG, seconds).
    """

    name = "base"

    def __init__(
        self,
        *,
        dim=64,
        lr=1e-3,
        reg=1e-4,
        batch_size=2048,
        max_passes=300,
        patience=20,
        eval_k=20,
        device="cpu",
        seed=0,
    ):
        if dim < 1 or lr <= 0 or reg < 0 or batch_size < 1 or max_passes < 1 or patience < 1:
            raise ValueError(
                f"need dim>=1, lr>0, reg>=0, batch_size>=1, max_passes>=1, patience>=1; got "
                f"dim={dim} lr={lr} reg={reg} batch_size={batch_size} "
                f"max_passes={max_passes} patience={patience}"
            )
        self.dim, self.lr, self.reg, self.batch_size = dim, lr, reg, batch_size
        self.max_passes, self.patience, self.eval_k = max_passes, patience, eval_k
        self.device, self.seed = device, seed

    def params(self) -> dict:
        return {
            k: v
            for k, v in vars(self).items()
            if not k.endswith("_")
            and k != "device"
            and not k.startswith("_")
            and isinstance(v, (int, float, str, bool))
        }

    # -- subclass hooks ------------------------------------------------------------------------
    def _setup(self, train, semantics, extras) -> list[torch.nn.Parameter]:
        raise NotImplementedError

    def _batches(self, rng: np.random.Generator):
        raise NotImplementedError

    def _loss(self, batch) -> torch.Tensor:
        raise NotImplementedError

    def _embeddings(self) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def _optimizer(self, params):
        return torch.optim.Adam(params, lr=self.lr)

    # -- fit -----------------------------------------------------------------------------------
    def fit(
        self,
        train: sp.csr_matrix,
        semantics=None,
        val: sp.csr_matrix | None = None,
        progress=None,
        **extras,
    ):
        """Fit on ``train`` (U, I) CSR; ``semantics`` (I, d) item vectors where the model uses
        them; ``val`` drives early stopping (without it all ``max_passes`` run)."""
        train = sp.csr_matrix(train, dtype=np.float32)
        if train.nnz == 0:
            raise UserError("empty training matrix")
        if semantics is not None:
            semantics = np.asarray(semantics, dtype=np.float32)
            if semantics.ndim != 2 or semantics.shape[0] != train.shape[1]:
                raise UserError(
                    f"semantics must have one row per item ({train.shape[1]}); "
                    f"got shape {semantics.shape}"
                )
            if not np.isfinite(semantics).all():
                raise UserError("semantics contain NaN or infinite values")
        self.train_ = train
        self.n_users_, self.n_items_ = train.shape
        torch.manual_seed(self.seed)
        self._gen = torch.Generator(device="cpu").manual_seed(self.seed)
        rng = np.random.default_rng(self.seed)
        params = self._setup(train, semantics, extras)
        self._params = list(params)
        opt = self._optimizer(params) if params else None
        self.history_: list[tuple[int, float, float]] = []
        best, best_state, since = -math.inf, None, 0
        tick = progress.task(f"{self.name} passes", self.max_passes) if progress else None
        t0 = time.perf_counter()
        for p in range(1, self.max_passes + 1 if opt else 1):
            for batch in self._batches(rng):
                loss = self._loss(batch)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            self._cache()
            ek = min(self.eval_k, self.n_items_)
            v = self.evaluate(val, ks=(ek,))[f"ndcg@{ek}"] if val is not None else p  # keep last
            self.history_.append((p, float(v), time.perf_counter() - t0))
            if tick:
                tick(1)
            if v > best:
                best, since = v, 0
                best_state = {k: x.detach().clone() for k, x in self._state().items()}
            else:
                since += 1
                if since >= self.patience:
                    break
        if best_state is not None:
            with torch.no_grad():
                for k, x in self._state().items():
                    x.copy_(best_state[k])
        self._cache()
        self.best_val_ = best if val is not None else None
        self.passes_ = len(self.history_)
        self.seconds_per_pass_ = (time.perf_counter() - t0) / max(1, self.passes_)
        return self

    def _state(self) -> dict[str, torch.Tensor]:
        return {f"p{i}": p for i, p in enumerate(self._params)}

    def _cache(self) -> None:
        with torch.no_grad():
            u, i = self._embeddings()
        self.user_emb_, self.item_emb_ = u.detach(), i.detach()
