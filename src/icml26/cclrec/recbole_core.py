"""CCLRec inside RecBole, without importing RecBole: config, item/user semantics, the model body.

RecBole's ``GeneralRecommender`` is subclassed in :mod:`icml26.cclrec.recbole_model` (which
imports RecBole); everything it does lives here in :class:`RecBoleCCLRecMixin`, so it can be
tested against RecBole's documented interface with a small fake when RecBole cannot be imported.

RecBole's contract for a general recommender, restated: ``__init__(config, dataset)`` with the
training split's ``dataset``; ``calculate_loss(interaction) -> scalar`` on a batch with the user,
item and ``neg_`` item fields (``input_type = PAIRWISE``); ``predict(interaction) -> (B,)``
scores of (user, item) pairs; ``full_sort_predict(interaction) -> (B * n_items,)`` scores of
the batch's users against every item id (id 0 is RecBole's padding, masked by the trainer).

The model keeps the estimator's parts (:class:`icml26.cclrec.model.CCLRec`): its encoder, its
sampler and its loss (BPR on the semantic negative + L2 + consensus-weighted InfoNCE). The
RecBole batch's (user, item) pairs give the users and the anchor positives; the structural and
semantic samples of those users come from the consensus sampler. RecBole's own ``neg_`` item is
not used: the official loss takes the first semantic negative as the BPR negative.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from icml26.core.errors import UserError

__all__ = ["DEFAULTS", "RecBoleCCLRecMixin", "field_texts", "item_semantics", "user_profiles"]

#: CCLRec's config keys and defaults (a RecBole YAML or ``config_dict`` overrides any of them).
DEFAULTS: dict[str, object] = {
    "embedding_size": 64,
    "n_layers": 2,
    "reg_weight": 1e-5,
    "cl_weight": 1.0,
    "cl_tau": 0.1,
    "w_pos": 3.0,
    "w_neg": 10.0,
    "text_rate": 0.02,
    "profile_rate": 2.8,
    "norm": "official",
    "cl_space": "official",
    "consensus": "sampled",
    "positives": "both",
    # item fields whose values make the item semantics (token, token_seq, float, float_seq)
    "cclrec_semantic_fields": None,
    # user fields whose values make the user profiles (default: mean of history semantics)
    "cclrec_profile_fields": None,
    # text encoder of token fields: "minilm" (packaged all-MiniLM-L6-v2), "hash" (no model), or
    # a sentence-transformers folder
    "cclrec_encoder": "minilm",
}


def _get(config, key):
    v = config[key] if key in config else None  # noqa: SIM401 - RecBole Config has no .get
    return DEFAULTS[key] if v is None else v


def _ftype(dataset, field) -> str:
    t = dataset.field2type[field]
    return str(getattr(t, "value", t))


def _field_list(config, key: str, dataset, source: str) -> list[str]:
    """The fields named by config ``key``, each checked against the dataset's ``source`` fields."""
    raw = _get(config, key)
    if raw is None:
        return []
    fields = [raw] if isinstance(raw, str) else list(raw)
    feat = dataset.get_item_feature() if source == "item" else dataset.get_user_feature()
    known = [f for f in getattr(feat, "columns", [])]
    for f in fields:
        if f not in known or f not in dataset.field2type:
            raise UserError(
                f"RecBole config `{key}` names the {source} field {f!r}, which the dataset "
                f"{getattr(dataset, 'dataset_name', '')!r} does not have loaded; loaded {source} "
                f"fields: {sorted(known)} (add it to `load_col: {source}:` in the YAML)"
            )
    return fields


def field_texts(dataset, feat, field: str) -> list[str]:
    """One string per row of ``feat`` for a token, token_seq or float ``field``."""
    t = _ftype(dataset, field)
    col = feat[field]
    if t == "token":
        tokens = dataset.field2id_token[field]
        return [str(tokens[i]) if i > 0 else "" for i in col.tolist()]
    if t == "token_seq":
        tokens = dataset.field2id_token[field]
        return [" ".join(str(tokens[i]) for i in row if i > 0) for row in col.tolist()]
    if t == "float":
        return [f"{field} {v:g}" for v in col.tolist()]
    raise UserError(f"field {field!r} has type {t}; text needs token, token_seq or float")


def _unit(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, np.float32)
    return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)


def _vectors(dataset, feat, fields: Sequence[str], encode) -> np.ndarray:
    """Mean of the L2-normalised per-field vectors (float_seq used as is, others as text)."""
    parts = []
    for f in fields:
        if _ftype(dataset, f) == "float_seq":
            parts.append(_unit(feat[f].detach().cpu().numpy()))
        else:
            parts.append(_unit(encode(field_texts(dataset, feat, f))))
    return _unit(np.mean(parts, axis=0))


def _encoder(name: str) -> Callable[[list[str]], np.ndarray]:
    from icml26.cclrec.semantics import hash_encoder

    if name == "hash":
        return hash_encoder(64)
    from icml26.core.embed import Embedder

    return Embedder(None if name == "minilm" else name).encode


def item_semantics(config, dataset) -> np.ndarray:
    """(n_items, d) float32 item semantics from ``cclrec_semantic_fields`` (row = item id)."""
    fields = _field_list(config, "cclrec_semantic_fields", dataset, "item")
    if not fields:
        raise UserError(
            "CCLRec needs item semantics: set `cclrec_semantic_fields` in the RecBole config to "
            "item fields (token, token_seq, float or float_seq), e.g. [movie_title, class]"
        )
    feat = dataset.get_item_feature()
    sem = _vectors(dataset, feat, fields, _encoder(str(_get(config, "cclrec_encoder"))))
    n_items = dataset.num(config["ITEM_ID_FIELD"])
    if sem.shape[0] != n_items:
        raise UserError(f"item features have {sem.shape[0]} rows; the dataset has {n_items} items")
    return sem


def user_profiles(config, dataset) -> np.ndarray | None:
    """(n_users, d) float32 user profiles from ``cclrec_profile_fields``, or None."""
    fields = _field_list(config, "cclrec_profile_fields", dataset, "user")
    if not fields:
        return None
    feat = dataset.get_user_feature()
    return _vectors(dataset, feat, fields, _encoder(str(_get(config, "cclrec_encoder"))))


class RecBoleCCLRecMixin:
    """The body of the RecBole model. The class using it must also be a ``torch.nn.Module`` and
    set ``USER_ID``, ``ITEM_ID``, ``n_users``, ``n_items`` and ``device`` before
    :meth:`_build` (RecBole's ``GeneralRecommender.__init__`` does)."""

    def _build(self, config: Mapping, dataset) -> None:
        from icml26.cclrec.model import CCLRec

        train = dataset.inter_matrix(form="csr").astype(np.float32)
        if train.shape != (self.n_users, self.n_items):
            raise UserError(
                f"interaction matrix {train.shape} != (n_users, n_items) "
                f"({self.n_users}, {self.n_items})"
            )
        sem = item_semantics(config, dataset)
        prof = user_profiles(config, dataset)
        seed = int(config["seed"] or 0) if "seed" in config else 0
        est = CCLRec(
            dim=int(_get(config, "embedding_size")),
            n_layers=int(_get(config, "n_layers")),
            reg=float(_get(config, "reg_weight")),
            cl_weight=float(_get(config, "cl_weight")),
            tau=float(_get(config, "cl_tau")),
            w_pos=float(_get(config, "w_pos")),
            w_neg=float(_get(config, "w_neg")),
            text_rate=float(_get(config, "text_rate")),
            profile_rate=float(_get(config, "profile_rate")),
            norm=str(_get(config, "norm")),
            cl_space=str(_get(config, "cl_space")),
            consensus=str(_get(config, "consensus")),
            positives=str(_get(config, "positives")),
            device=str(self.device),
            seed=seed,
        )
        # what Recommender.fit sets before _setup
        est.train_, (est.n_users_, est.n_items_) = train, train.shape
        est._gen = torch.Generator(device="cpu").manual_seed(seed)
        params = est._setup(train, sem, {"user_profiles": prof})
        self.cclrec = est
        # the estimator's tensors as this module's parameters: RecBole's optimizer, checkpoint
        # and load_state_dict see them
        self.cclrec_params = torch.nn.ParameterList(params)
        self._rng = np.random.default_rng(seed)
        self._emb_cache = None

    def calculate_loss(self, interaction) -> torch.Tensor:
        self._emb_cache = None
        users = interaction[self.USER_ID].detach().cpu().numpy().astype(np.int64)
        pos = interaction[self.ITEM_ID].detach().cpu().numpy().astype(np.int64)
        smp = self.cclrec.sampler_.sample(users, self._rng)
        smp.rand_pos[:, 0] = pos  # the batch's positive is the BPR positive and the anchor
        return self.cclrec._loss(smp)

    def _all_embeddings(self):
        if self.training or self._emb_cache is None:
            with torch.set_grad_enabled(self.training):
                out = self.cclrec._embeddings()
            if self.training:
                return out
            self._emb_cache = out
        return self._emb_cache

    def predict(self, interaction) -> torch.Tensor:
        u_all, i_all = self._all_embeddings()
        u, i = interaction[self.USER_ID], interaction[self.ITEM_ID]
        return (u_all[u] * i_all[i]).sum(-1)

    def full_sort_predict(self, interaction) -> torch.Tensor:
        u_all, i_all = self._all_embeddings()
        return (u_all[interaction[self.USER_ID]] @ i_all.T).reshape(-1)  # (B * n_items,)
