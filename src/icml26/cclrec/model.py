"""CCLRec: consensus-weighted contrastive learning on an LLMRec-style graph encoder.

A reconstruction from the official code (the published ``main.py`` passes six graphs to a
two-graph ``forward``, so it cannot run as released; see docs/cclrec.md).

Encoder (``MM_Model``): 64-d ID embeddings propagated on the user-item graph, user side then item
side per layer, ``len(weight_size)`` layers with the last one softmaxed, mean over layers 0..L.
Side branches, each a learned linear map of fixed vectors, propagated through the same graph and
added L2-normalised with fixed rates: item text (``text_rate`` 0.02: ``ui·W s``, ``iu·ui·W s``),
user profile (``profile_rate`` 2.8: ``item_prof = iu·W p``, ``user_prof = ui·item_prof``) and item
attributes (``attr_rate`` 0.005 each). Because propagation and the maps are linear, the raw
vectors are propagated once at ``fit`` and the maps applied after (exactly equal, much cheaper).

Loss per batch of users (eq. of the official ``Trainer``): BPR on (u, random pos, semantic neg)
+ L2 (``reg``) on the batch's final embeddings + :func:`weighted_info_nce` with anchor = the BPR
positive, positives = [structural, semantic], explicit negatives = [structural, semantic] ×w−,
in-batch negatives = the other rows' positives. ``cl_space`` picks the embedding the InfoNCE
acts on: ``official`` (``item_prof``), ``id`` (final item embedding), ``semantic`` (item text).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from icml26.cclrec.base import Recommender
from icml26.cclrec.graph import bipartite_norm, to_torch_sparse
from icml26.cclrec.sampler import ConsensusSampler, SamplerConfig

__all__ = ["CCLRec", "weighted_info_nce"]


def weighted_info_nce(
    anchor: torch.Tensor,
    pos: torch.Tensor,
    neg: torch.Tensor,
    w_pos: torch.Tensor,
    w_neg: torch.Tensor,
    tau: float = 0.1,
) -> torch.Tensor:
    """Consensus-weighted InfoNCE with explicit and in-batch negatives.

    ``anchor`` (R, d), ``pos`` (R, P, d), ``neg`` (R, N, d); ``w_pos``, ``w_neg`` (R,) per row.
    With cosine similarities ``s`` and the other rows' positives as in-batch negatives ``B_r``:

        L = -Σ_{r,j} w+_r log( e^{s(a_r,p_rj)/τ} / (e^{s(a_r,p_rj)/τ} + Σ_n w-_r e^{s(a_r,n)/τ}
                                + Σ_{b∈B_r} e^{s(a_r,b)/τ}) ) / Σ_{r,j} w+_r
    """
    r, p_n, d = pos.shape
    a = F.normalize(anchor, dim=-1)
    p = F.normalize(pos, dim=-1)
    n = F.normalize(neg, dim=-1)
    s_pos = torch.einsum("rd,rpd->rp", a, p) / tau  # (R, P)
    s_neg = torch.einsum("rd,rnd->rn", a, n) / tau + torch.log(w_neg)[:, None]  # (R, N)
    s_bat = (a @ p.reshape(r * p_n, d).T / tau).view(r, r, p_n)  # (R, R, P)
    # own positives out: in place on the diagonal (the same values and gradients as a masked_fill
    # with an eye mask, without the (R, R) mask and the copy: ~16% of this function on CPU)
    s_bat.diagonal(dim1=0, dim2=1).fill_(-torch.inf)
    s_bat = s_bat.view(r, r * p_n)
    rest = torch.logaddexp(
        torch.logsumexp(s_neg, 1, keepdim=True), torch.logsumexp(s_bat, 1, keepdim=True)
    )  # (R, 1)
    log_prob = s_pos - torch.logaddexp(s_pos, rest)
    w = w_pos[:, None].expand_as(log_prob)
    return -(w * log_prob).sum() / w.sum()


class CCLRec(Recommender):
    """CCLRec estimator. ``fit(train, semantics, val, user_profiles=, attributes=)``.

    ``semantics`` (I, d): item semantic vectors (text branch and semantic sampler);
    ``user_profiles`` (U, d'): embedded user profiles (default: mean of history semantics);
    ``attributes``: dict name -> (I, d'') per-attribute item vectors (optional).
    Defaults follow the official parser: dim 64, weight_size [64, 64], tau 0.1, AdamW lr 1e-3,
    batch 1024 users, reg 1e-5, w+ 3, w- 10.
    """

    name = "CCLRec"

    def __init__(
        self,
        *,
        dim=64,
        tau=0.1,
        w_pos=3.0,
        w_neg=10.0,
        n_layers=2,
        norm="official",
        cl_space="official",
        consensus="sampled",
        positives="both",
        cl_weight=1.0,
        text_rate=0.02,
        profile_rate=2.8,
        attr_rate=0.005,
        lr=1e-3,
        reg=1e-5,
        batch_size=1024,
        weight_decay=0.01,
        **kw,
    ):
        super().__init__(dim=dim, lr=lr, reg=reg, batch_size=batch_size, **kw)
        if cl_space not in ("official", "id", "semantic"):
            raise ValueError(f"cl_space must be official|id|semantic; got {cl_space!r}")
        if positives not in ("both", "structural", "semantic"):
            raise ValueError(f"positives must be both|structural|semantic; got {positives!r}")
        if tau <= 0:
            raise ValueError(f"tau must be > 0; got {tau}")
        self.sampler_config = SamplerConfig(w_pos=w_pos, w_neg=w_neg, consensus=consensus)
        self.tau, self.w_pos, self.w_neg, self.n_layers, self.norm = (
            tau,
            w_pos,
            w_neg,
            n_layers,
            norm,
        )
        self.cl_space, self.consensus, self.positives, self.cl_weight = (
            cl_space,
            consensus,
            positives,
            cl_weight,
        )
        self.text_rate, self.profile_rate, self.attr_rate = text_rate, profile_rate, attr_rate
        self.weight_decay = weight_decay

    def _optimizer(self, params):
        return torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay)

    def _setup(self, train, semantics, extras):
        if semantics is None:
            raise ValueError("CCLRec needs item semantics (n_items, d)")
        dev, g = self.device, self._gen
        self.sampler_ = ConsensusSampler(train, semantics, self.sampler_config)
        ui, iu = bipartite_norm(train, self.norm)
        self._ui, self._iu = to_torch_sparse(ui, dev), to_torch_sparse(iu, dev)
        prof = extras.get("user_profiles")
        if prof is None:
            deg = np.maximum(np.asarray(train.sum(1)), 1.0)
            prof = np.asarray(train @ semantics) / deg
        prof = np.asarray(prof, np.float32)
        if prof.shape[0] != self.n_users_ or not np.isfinite(prof).all():
            raise ValueError(
                f"user_profiles must be finite with {self.n_users_} rows; got shape {prof.shape}"
            )
        attrs = {k: np.asarray(v, np.float32) for k, v in (extras.get("attributes") or {}).items()}
        for k, v in attrs.items():
            if v.shape[0] != self.n_items_:
                raise ValueError(f"attributes[{k!r}] must have {self.n_items_} rows; got {v.shape}")
        # propagate the raw vectors once: P(xWᵀ + b) = (Px)Wᵀ + (P1)bᵀ
        ones_u = np.ones((self.n_users_, 1), np.float32)
        ones_i = np.ones((self.n_items_, 1), np.float32)
        t = lambda x: torch.as_tensor(np.asarray(x, np.float32), device=dev)  # noqa: E731
        s_u = ui @ semantics
        self._raw = {
            "text_user": (t(s_u), t(ui @ ones_i)),
            "text_item": (t(iu @ s_u), t(iu @ (ui @ ones_i))),
            "item_prof": (t(iu @ prof), t(iu @ ones_u)),
            "user_prof": (t(ui @ (iu @ prof)), t(ui @ (iu @ ones_u))),
        }
        for k, v in attrs.items():
            a_u = ui @ v
            self._raw[f"attr_user:{k}"] = (t(a_u), t(ui @ ones_i))
            self._raw[f"attr_item:{k}"] = (t(iu @ a_u), t(iu @ (ui @ ones_i)))
        self._attr_keys = list(attrs)

        def lin(d_in):
            m = torch.nn.Linear(d_in, self.dim)  # initialised on CPU with the seeded generator
            torch.nn.init.xavier_uniform_(m.weight, generator=g)
            torch.nn.init.uniform_(m.bias, -(d_in**-0.5), d_in**-0.5, generator=g)
            return m.to(dev)

        self._text = lin(semantics.shape[1])
        self._user = lin(prof.shape[1])
        self._item = lin(next(iter(attrs.values())).shape[1]) if attrs else None
        eu, ei = torch.empty(self.n_users_, self.dim), torch.empty(self.n_items_, self.dim)
        torch.nn.init.xavier_uniform_(eu, generator=g)
        torch.nn.init.xavier_uniform_(ei, generator=g)
        self._eu, self._ei = torch.nn.Parameter(eu.to(dev)), torch.nn.Parameter(ei.to(dev))
        mods = [self._text, self._user] + ([self._item] if self._item else [])
        self._users_with_hist = np.flatnonzero(np.diff(train.indptr) > 0)
        self.stats_: list[dict] = []
        return [self._eu, self._ei] + [p for m in mods for p in m.parameters()]

    def _branch(self, key, lin, rows=None):
        x, ones = self._raw[key]
        if rows is not None:
            x, ones = x[rows], ones[rows]
        return x @ lin.weight.T + ones * lin.bias

    def _id_embeddings(self):
        """ID part: (U, d), (I, d); user side then item side per layer, last layer softmaxed."""
        u, i = self._eu, self._ei
        us, its = [u], [i]
        for layer in range(self.n_layers):
            last = layer == self.n_layers - 1
            u = self._ui(i)
            u = torch.softmax(u, -1) if last else u
            i = self._iu(u)
            i = torch.softmax(i, -1) if last else i
            us.append(u)
            its.append(i)
        return torch.stack(us).mean(0), torch.stack(its).mean(0)

    def _side(self, side, rows=None):
        """Sum of the rate-weighted normalised side branches for users or items (rows or all)."""
        out = self.text_rate * F.normalize(self._branch(f"text_{side}", self._text, rows), dim=1)
        prof_key = "user_prof" if side == "user" else "item_prof"
        out = out + self.profile_rate * F.normalize(self._branch(prof_key, self._user, rows), dim=1)
        for k in self._attr_keys:
            out = out + self.attr_rate * F.normalize(
                self._branch(f"attr_{side}:{k}", self._item, rows), dim=1
            )
        return out

    def _embeddings(self):
        ug, ig = self._id_embeddings()
        return ug + self._side("user"), ig + self._side("item")

    def _cl_embed(self, ig_id, rows):
        """The InfoNCE space at item ``rows``: item_prof | final item embedding | item text."""
        if self.cl_space == "official":
            return self._branch("item_prof", self._user, rows)
        if self.cl_space == "semantic":
            return self._branch("text_item", self._text, rows)
        return ig_id[rows] + self._side("item", rows)

    def _batches(self, rng):
        n_batches = max(1, -(-self.train_.nnz // self.batch_size))
        pool = self._users_with_hist
        for _ in range(n_batches):
            replace = self.batch_size > len(pool)
            users = rng.choice(pool, self.batch_size, replace=replace)
            smp = self.sampler_.sample(users, rng)
            self.stats_.append(smp.stats)
            yield smp

    def _loss(self, smp):
        dev = self.device
        tt = lambda x: torch.as_tensor(x, device=dev)  # noqa: E731
        ug, ig = self._id_embeddings()
        u, p, n = tt(smp.users), tt(smp.rand_pos[:, 0]), tt(smp.sem_neg[:, 0])
        eu = ug[u] + self._side("user", u)
        ep, en = ig[p] + self._side("item", p), ig[n] + self._side("item", n)
        bpr = -F.logsigmoid((eu * (ep - en)).sum(-1) + 1e-8).mean()
        l2 = 0.5 * (eu.pow(2).sum() + ep.pow(2).sum() + en.pow(2).sum()) / len(u)
        if self.cl_weight == 0:  # the BPR-only control: skip the InfoNCE (the sampler ran)
            return bpr + self.reg * l2
        k = smp.rand_pos.shape[1]
        cols = {
            "structural": [smp.struct_pos],
            "semantic": [smp.sem_pos],
            "both": [smp.struct_pos, smp.sem_pos],
        }[self.positives]
        pos_ids = np.stack([c.reshape(-1) for c in cols], 1)  # (B*k, P)
        neg_ids = np.stack([smp.struct_neg.reshape(-1), smp.sem_neg.reshape(-1)], 1)  # (B*k, 2)
        anchor = self._cl_embed(ig, p).repeat_interleave(k, 0)  # (B*k, d)
        pos = self._cl_embed(ig, tt(pos_ids.reshape(-1))).reshape(*pos_ids.shape, -1)
        neg = self._cl_embed(ig, tt(neg_ids.reshape(-1))).reshape(*neg_ids.shape, -1)
        wp = tt(np.repeat(smp.w_pos, k)).float()
        wn = tt(np.repeat(smp.w_neg, k)).float()
        nce = weighted_info_nce(anchor, pos, neg, wp, wn, self.tau)
        return bpr + self.reg * l2 + self.cl_weight * nce

    def consensus_rates(self) -> dict:
        """Means of the sampler's logged shares over all batches of the fit."""
        if not getattr(self, "stats_", None):
            return {}
        return {k: float(np.mean([s[k] for s in self.stats_])) for k in self.stats_[0]}
