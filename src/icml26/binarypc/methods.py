"""Selection methods behind one interface: BinaryPC and the baselines at the same token budget.

A method's ``prepare(keys, generator)`` builds per-request metadata from the prefill keys
(B, Hkv, P, D); ``score(q, meta, k)`` returns ``(scores (B, Hkv, P), forced (B, Hkv, P) bool or
None)`` for one decode query q (B, Hq, D) and total budget k. ``select.select_tokens`` then keeps
decode tokens + forced tokens + the top scores, all within k.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from icml26.binarypc.codes import binary_pcs, gen_device, hash_keys, pack_signs, recon_error
from icml26.binarypc.select import BACKENDS, QSCALES, code_scores, lut_scores, work_dtype

__all__ = ["METHODS", "BinaryPCConfig", "make_method", "metadata_bytes", "select_batch"]

METHODS = ("bpc", "oracle", "simhash", "magicpig", "quest", "loki", "streaming", "random")
ERR_COUNTS = ("floor", "round")
RECODES = ("new", "all")


@dataclass(frozen=True)
class BinaryPCConfig:
    """Settings of the patch; defaults are the official code's.

    method: one of METHODS. bits: code width (1..64). iters: alternations per direction.
    mask_out: share of the context dropped (0.98 keeps 2%). min_remain: budget floor (tokens).
    token_budget: fixed budget instead of mask_out/min_remain. err_ratio: share of the budget given
    to the worst-reconstructed keys (BinaryPC only). dense_layers: layer indices kept dense.
    min_context: contexts shorter than this stay dense. quantize: int8 query projection.
    directions: optional offline directions tensor (n_layers, Hkv, bits, D) instead of online ones.
    page: Quest page size. sinks: StreamingLLM and MagicPIG attention sinks. seed: random
    directions / hyperplanes. lsh_k/lsh_l: MagicPIG bits per table / tables (K=10, L=150, its
    defaults); min_collisions: a key is sampled when it collides with the query in at least this
    many tables; window: MagicPIG's local window (64); center: subtract the prefill key mean
    before hashing (attention is unchanged by it). loki_rank: Loki's principal dimensions (r).

    Two rules follow the official ``bpc_pytorch.py`` by default, with this project's earlier
    rules as options: ``err_count="floor"`` gives the error set max(⌊err_ratio·k⌋, 1) tokens
    (0 when err_ratio is 0: the ablation), ``"round"`` gives round(err_ratio·k);
    ``qscale="group"`` quantizes the query projections of a GQA group with one absmax scale,
    ``"head"`` with one per query head. backend: "auto" (the compiled CPU kernel where it
    builds, else tensors), "cpp" (the kernel or an error), "torch" (tensors); same selections.
    recode: on a later prefill chunk (a second turn, chunked prefill) "new" hashes only the new
    tokens on the directions already there, "all" recomputes directions and codes over the whole
    cache. code_decode: hash the uncoded decode tokens every this many tokens (0: never; the
    official path always attends them).
    """

    method: str = "bpc"
    bits: int = 64
    iters: int = 4
    mask_out: float = 0.98
    min_remain: int = 128
    token_budget: int | None = None
    err_ratio: float = 0.1
    dense_layers: tuple[int, ...] = (0, 1)
    min_context: int = 0
    quantize: bool = True
    page: int = 16
    sinks: int = 4
    seed: int = 0
    lsh_k: int = 10
    lsh_l: int = 150
    min_collisions: int = 2
    window: int = 64
    center: bool = True
    err_count: str = "floor"
    qscale: str = "group"
    loki_rank: int = 16
    backend: str = "auto"
    recode: str = "new"
    code_decode: int = 0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}; got {self.method!r}")
        if not 1 <= self.bits <= 64:
            raise ValueError(f"bits must be in [1, 64]; got {self.bits}")
        if self.iters < 1:
            raise ValueError(f"iters must be >= 1; got {self.iters}")
        if not 0.0 <= self.mask_out < 1.0:
            raise ValueError(f"mask_out must be in [0, 1); got {self.mask_out}")
        if self.min_remain < 1:
            raise ValueError(f"min_remain must be >= 1; got {self.min_remain}")
        if self.token_budget is not None and self.token_budget < 1:
            raise ValueError(f"token_budget must be >= 1; got {self.token_budget}")
        if not 0.0 <= self.err_ratio <= 1.0:
            raise ValueError(f"err_ratio must be in [0, 1]; got {self.err_ratio}")
        if any(i < 0 for i in self.dense_layers):
            raise ValueError(f"dense_layers must be >= 0; got {self.dense_layers}")
        if self.page < 1 or self.sinks < 0 or self.min_context < 0:
            raise ValueError("page must be >= 1, sinks and min_context >= 0")
        if not 1 <= self.lsh_k <= 30 or self.lsh_l < 1 or self.window < 0:
            raise ValueError(
                f"lsh_k must be in [1, 30], lsh_l >= 1, window >= 0; got lsh_k={self.lsh_k}, "
                f"lsh_l={self.lsh_l}, window={self.window}"
            )
        if self.err_count not in ERR_COUNTS:
            raise ValueError(
                f"err_count must be one of {', '.join(ERR_COUNTS)}; got {self.err_count!r}"
            )
        if self.qscale not in QSCALES:
            raise ValueError(f"qscale must be one of {', '.join(QSCALES)}; got {self.qscale!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {self.backend!r}")
        if self.recode not in RECODES:
            raise ValueError(f"recode must be one of {', '.join(RECODES)}; got {self.recode!r}")
        if self.code_decode < 0:
            raise ValueError(f"code_decode must be >= 0; got {self.code_decode}")
        if self.loki_rank < 1:
            raise ValueError(f"loki_rank must be >= 1; got {self.loki_rank}")
        if not 1 <= self.min_collisions <= self.lsh_l:
            raise ValueError(
                f"min_collisions must be in [1, lsh_l={self.lsh_l}]; got {self.min_collisions}"
            )


def _memo(meta: dict, q: torch.Tensor, fn):
    """fn() once per query tensor when ``meta`` carries a "memo" dict (the claim scores the same
    queries at several budgets); otherwise just fn()."""
    memo = meta.get("memo")
    if memo is None:
        return fn()
    key = ("scores", q.data_ptr(), tuple(q.shape))
    if key not in memo:
        memo[key] = fn()
    return memo[key]


def error_count(err_ratio: float, k: int, rule: str = "floor") -> int:
    """Tokens of the error set within a budget of ``k``: "floor" (official) max(⌊err_ratio·k⌋, 1),
    0 when ``err_ratio`` is 0; "round" round(err_ratio·k)."""
    if rule == "floor":
        return 0 if err_ratio <= 0 else max(int(err_ratio * k), 1)
    if rule == "round":
        return int(round(err_ratio * k))
    raise ValueError(f"err_count must be one of {', '.join(ERR_COUNTS)}; got {rule!r}")


def worst_first(err: torch.Tensor) -> torch.Tensor:
    """Token indices of each row of ``err`` (..., P), largest error first, ties to the later
    token (the selection's tie rule)."""
    P = err.shape[-1]
    order = torch.sort(err.flip(-1), dim=-1, descending=True, stable=True).indices
    return (P - 1) - order


class _BinaryPC:
    batched = ("V", "codes", "err", "err_order")  # meta entries with a leading batch dim

    def __init__(self, cfg: BinaryPCConfig):
        self.cfg = cfg

    def prepare(self, keys, generator, directions=None):
        k32 = keys.to(work_dtype(keys))
        if directions is None:
            V = binary_pcs(k32, self.cfg.bits, self.cfg.iters, generator=generator)
        else:  # (Hkv, bits, D) offline
            V = directions.to(device=keys.device, dtype=k32.dtype).expand(keys.shape[0], -1, -1, -1)
        codes = hash_keys(k32, V)
        err = recon_error(k32, codes, V)
        return {"V": V, "codes": codes, "err": err, "err_order": worst_first(err)}

    def extend(self, meta, keys):
        """``meta`` with the new ``keys`` (B, Hkv, n, D) hashed on the existing directions
        appended (chunked prefill: only the new tokens are coded)."""
        k32 = keys.to(meta["V"].dtype)
        V = meta["V"]
        if V.shape[0] != k32.shape[0]:
            V = V.expand(k32.shape[0], -1, -1, -1)
        codes = hash_keys(k32, V)
        err = torch.cat([meta["err"].expand(k32.shape[0], -1, -1), recon_error(k32, codes, V)], -1)
        codes = torch.cat([meta["codes"].expand(k32.shape[0], -1, -1), codes], -1)
        return {"V": V, "codes": codes, "err": err, "err_order": worst_first(err)}

    def score(self, q, meta, k):
        cfg = self.cfg
        s = _memo(
            meta,
            q,
            lambda: code_scores(
                q, meta["codes"], meta["V"], cfg.quantize, cfg.qscale, backend=cfg.backend
            ),
        )
        n_err = min(error_count(cfg.err_ratio, k, cfg.err_count), s.shape[-1])
        forced = None
        if n_err > 0:
            cached = meta.get("_forced")  # one mask per error count, rebuilt when k moves
            if cached is not None and cached[0] == n_err and cached[1].shape[0] == s.shape[0]:
                forced = cached[1]
            else:
                order = meta["err_order"][..., :n_err]
                if order.shape[0] != s.shape[0]:
                    order = order.expand(s.shape[0], -1, -1)
                forced = torch.zeros_like(s, dtype=torch.bool).scatter_(-1, order, True)
                meta["_forced"] = (n_err, forced)
        return s, forced


class _Oracle:
    """Exact top-k: max over the group of the true softmax weight (full-context normalizer)."""

    batched = ("keys",)

    def __init__(self, cfg):
        self.cfg = cfg

    def prepare(self, keys, generator, directions=None):
        return {"keys": keys}

    def score(self, q, meta, k):
        K = meta["keys"].to(work_dtype(q))
        B, Hq, D = q.shape
        Hkv = K.shape[1]

        def f():
            qg = q.reshape(B, Hkv, Hq // Hkv, D).to(K.dtype)
            return torch.einsum("bhgd,bhld->bhgl", qg, K).amax(2)

        return _memo(meta, q, f), None


class _SimHash:
    """64 random hyperplanes (same 8 B/token); score = bits − 2·Hamming(code(q), code(k))."""

    batched = ("codes",)

    def __init__(self, cfg):
        self.cfg = cfg

    def prepare(self, keys, generator, directions=None):
        D = keys.shape[-1]
        R = torch.randn(
            (D, self.cfg.bits), generator=generator, dtype=torch.float32, device=gen_device(generator)
        ).to(keys.device)
        codes = pack_signs(
            torch.where(keys.to(work_dtype(keys)) @ R.to(work_dtype(keys)) >= 0, 1.0, -1.0)
        )
        return {"R": R, "codes": codes}

    def score(self, q, meta, k):
        B, Hq, D = q.shape
        Hkv = meta["codes"].shape[1]

        def f():
            p = torch.where(q.to(work_dtype(q)) @ meta["R"].to(work_dtype(q)) >= 0, 1.0, -1.0)
            return lut_scores(p, meta["codes"]).reshape(B, Hkv, Hq // Hkv, -1).amax(2)

        return _memo(meta, q, f), None


def _binom_tail(c: torch.Tensor, n: int, m: int) -> torch.Tensor:
    """P(X >= m) for X ~ Binomial(n, c), elementwise in float64."""
    c = c.to(torch.float64).clamp(0.0, 1.0)
    below = torch.zeros_like(c)
    for j in range(m):
        below = below + math.comb(n, j) * c**j * (1.0 - c) ** (n - j)
    return (1.0 - below).clamp(0.0, 1.0)


class _MagicPIG:
    """MagicPIG (Chen et al., 2024): LSH *sampling* with an importance-weighted estimator.

    ``lsh_l`` tables of ``lsh_k`` random-hyperplane bits hash the (centered) prefill keys and each
    query head. A prefill key is sampled for a query head when it collides in at least
    ``min_collisions`` tables; its sampling probability is the exact collision tail
    P(Bin(L, (1 − θ/π)^K) ≥ m) with θ the angle between query and (centered) key. The first
    ``sinks`` tokens, the last ``window`` tokens and every decode token are attended exactly;
    the output is Σ w_i v_i / Σ w_i with w_i = exp(s_i) for those and exp(s_i)/p_i for sampled
    keys. Selection is per *query head* (the KV head gathers the union). Budget: if dense +
    sampled tokens exceed ``k`` for a query head, the sample is thinned uniformly at random to fit
    (the thinning rate multiplies p_i, so the estimator keeps its form); the realized budget is
    what was attended. Thinning draws are seeded by (seed, query position), so a batched replay
    equals step-by-step decode; they come from a generator on the keys' device (CPU and CUDA
    draws differ, each reproducible). The output and the attended set are on the keys' device.
    """

    batched = ("mu", "codes", "kc")

    def __init__(self, cfg):
        self.cfg = cfg

    def prepare(self, keys, generator, directions=None):
        B, H, P, D = keys.shape
        K, Lt = self.cfg.lsh_k, self.cfg.lsh_l
        R = torch.randn(
            (D, Lt * K), generator=generator, dtype=torch.float32, device=gen_device(generator)
        ).to(keys.device)
        k = keys.to(work_dtype(keys))
        R = R.to(k.dtype)
        mu = k.mean(2, keepdim=True) if self.cfg.center else torch.zeros_like(k[:, :, :1])
        kc = k - mu
        return {"R": R, "mu": mu, "codes": self._hash(kc, R), "kc": kc, "P": P}

    def _hash(self, x, R):
        K, Lt = self.cfg.lsh_k, self.cfg.lsh_l
        bits = (x @ R >= 0).to(torch.int32).reshape(*x.shape[:-1], Lt, K)
        return (bits << torch.arange(K, dtype=torch.int32, device=x.device)).sum(-1)

    def attend(self, q, keys, values, meta, k, scaling, allowed=None, positions=None):
        """q (B, Hq, D); keys/values (B, Hkv, L, D) with the first P prefill tokens hashed in
        ``meta``. ``positions`` (B,) is each query's position (default L − 1). Returns the
        output (B, Hq, D) and the attended set (B, Hq, L) bool."""
        cfg = self.cfg
        B, Hq, D = q.shape
        Hkv, L = keys.shape[1], keys.shape[2]
        G, P = Hq // Hkv, meta["P"]
        dev = keys.device  # everything below lives beside the keys
        if positions is None:
            positions = torch.full((B,), L - 1, dtype=torch.long, device=dev)
        positions = positions.to(dev)
        pos = torch.arange(L, device=dev)
        vis = pos[None, :] <= positions[:, None]  # (B, L) causal
        if allowed is not None:
            vis = vis & allowed.to(dev)
        dense = (pos[None, :] < cfg.sinks) | (pos[None, :] > positions[:, None] - cfg.window)
        dense = dense | (pos[None, :] >= P)
        dense = (dense & vis)[:, None, :].expand(B, Hq, L)
        qf = q.to(work_dtype(q))
        qcodes = self._hash(qf, meta["R"])  # (B, Hq, Lt)
        at = positions.tolist()  # one read of the query positions (no sync per row)
        kcodes = meta["codes"]  # (B', Hkv, P, Lt) with B' in {1, B}
        kc = meta["kc"]
        out = torch.empty((B, Hq, D), dtype=qf.dtype, device=dev)
        sel = torch.zeros((B, Hq, L), dtype=torch.bool, device=dev)
        memo = meta.get("memo")  # optional dict: reuse collisions across budgets (claim)
        for b in range(B):
            bk = b if kcodes.shape[0] > 1 else 0
            key = (b, int(at[b]))
            if memo is not None and key in memo:
                hits, prob = memo[key]
            else:
                kcg = kcodes[bk].repeat_interleave(G, 0)  # (Hq, P, Lt)
                hits = (kcg == qcodes[b][:, None, :]).sum(-1)  # (Hq, P)
                kcb = kc[bk].repeat_interleave(G, 0)  # (Hq, P, D)
                cos = torch.einsum("hd,hpd->hp", qf[b], kcb) / (
                    qf[b].norm(dim=-1, keepdim=True) * kcb.norm(dim=-1)
                ).clamp_min(1e-30)
                u = 1.0 - torch.arccos(cos.clamp(-1.0, 1.0).double()) / math.pi
                prob = _binom_tail(u**cfg.lsh_k, cfg.lsh_l, cfg.min_collisions)
                if memo is not None:
                    memo[key] = (hits, prob)
            cand = (hits >= cfg.min_collisions) & ~dense[b, :, :P] & vis[b, None, :P]
            n_dense = dense[b].sum(-1)  # (Hq,)
            room = (k - n_dense).clamp_min(0)
            n_cand = cand.sum(-1)
            over = n_cand > room
            if bool(over.any()):
                # a generator on the keys' device, same seed (on the CPU: the same draws as
                # ever; a CUDA generator draws its own stream, reproducible on that device)
                g = torch.Generator(device=dev).manual_seed(
                    cfg.seed * 1_000_003 + int(at[b])
                )
                r = torch.rand((Hq, P), generator=g, dtype=torch.float64, device=dev)
                r = torch.where(cand, r, torch.full_like(r, 2.0))
                rank = r.argsort(-1).argsort(-1)
                keep = cand & (rank < room[:, None])
                rate = torch.where(over, room / n_cand.clamp_min(1), torch.ones_like(room)).double()
                cand = torch.where(over[:, None], keep, cand)
                prob = prob * rate[:, None]
            s_all = sel[b]
            s_all[:, :P] = cand
            s_all |= dense[b]
            ks = keys[b].to(qf.dtype).repeat_interleave(G, 0)  # (Hq, L, D)
            logits = torch.einsum("hd,hld->hl", qf[b], ks).double() * scaling
            logw = torch.full_like(logits, -math.inf)
            logw[:, :P] = torch.where(
                cand, logits[:, :P] - prob.clamp_min(1e-300).log(), logw[:, :P]
            )
            logw = torch.where(dense[b], logits, logw)
            w = torch.softmax(logw, -1).to(qf.dtype)
            vv = values[b].to(qf.dtype).repeat_interleave(G, 0)
            out[b] = torch.einsum("hl,hld->hd", w, vv)
        return out.to(q.dtype), sel


class _Quest:
    """Pages of ``page`` tokens; page score = Σ_d max(q_d·min_d, q_d·max_d) (an upper bound on
    q·k in the page), max over the group; each token gets its page's score."""

    batched = ("lo", "hi")

    def __init__(self, cfg):
        self.cfg = cfg

    def prepare(self, keys, generator, directions=None):
        B, H, P, D = keys.shape
        pg = self.cfg.page
        n = math.ceil(P / pg)
        pad = n * pg - P
        k = keys.to(work_dtype(keys))
        lo = (
            torch.nn.functional.pad(k, (0, 0, 0, pad), value=math.inf)
            .reshape(B, H, n, pg, D)
            .amin(3)
        )
        hi = (
            torch.nn.functional.pad(k, (0, 0, 0, pad), value=-math.inf)
            .reshape(B, H, n, pg, D)
            .amax(3)
        )
        return {"lo": lo, "hi": hi, "P": P}

    def score(self, q, meta, k):
        B, Hq, D = q.shape
        Hkv = meta["lo"].shape[1]
        qg = q.reshape(B, Hkv, Hq // Hkv, 1, D).to(meta["lo"].dtype)
        ub = torch.maximum(qg * meta["lo"][:, :, None], qg * meta["hi"][:, :, None]).sum(-1)
        ps = ub.amax(2)  # (B, Hkv, n)
        s = ps.repeat_interleave(self.cfg.page, dim=-1)[..., : meta["P"]]
        # ties within a page are broken towards later tokens by select_tokens
        return s, None


class _Loki:
    """Loki (Singhania et al., 2024): low-rank keys. The top ``loki_rank`` principal directions
    of each KV head's prefill keys (eigenvectors of KᵀK, uncentered: the best rank-r subspace for
    dot products) project keys and query; score = q_r·k_r, max over the group; top-k, then
    exact attention over the selected full keys. Directions are computed per request from the
    prefill (Loki calibrates them offline; online here, like BinaryPC's online directions)."""

    batched = ("U", "kr")

    def __init__(self, cfg):
        self.cfg = cfg

    def prepare(self, keys, generator, directions=None):
        k = keys.to(work_dtype(keys))
        r = min(self.cfg.loki_rank, k.shape[-1])
        C = torch.einsum("bhld,bhle->bhde", k.double(), k.double())  # (B, Hkv, D, D)
        _, vecs = torch.linalg.eigh(C)  # ascending eigenvalues
        U = vecs[..., -r:].flip(-1).to(k.dtype)  # (B, Hkv, D, r), largest first
        return {"U": U, "kr": k @ U}

    def score(self, q, meta, k):
        B, Hq, D = q.shape
        U, kr = meta["U"], meta["kr"]
        Hkv = kr.shape[1]

        def f():
            qg = q.reshape(B, Hkv, Hq // Hkv, D).to(U.dtype)
            qr = torch.einsum("bhgd,bhdr->bhgr", qg, U)
            return torch.einsum("bhgr,bhlr->bhgl", qr, kr).amax(2)

        return _memo(meta, q, f), None


class _Streaming:
    """``sinks`` first tokens plus the most recent ones."""

    batched = ()  # "shape" (B, H, P) is rewritten by select_batch

    def __init__(self, cfg):
        self.cfg = cfg

    def prepare(self, keys, generator, directions=None):
        B, H, P, _ = keys.shape
        return {"shape": (B, H, P), "device": keys.device}

    def score(self, q, meta, k):
        B, H, P = meta["shape"]
        s = torch.arange(P, device=meta["device"], dtype=torch.float32).expand(B, H, P)
        forced = torch.zeros((B, H, P), dtype=torch.bool, device=meta["device"])
        forced[..., : min(self.cfg.sinks, P)] = True
        return s, forced


class _Random:
    """Random-k: a uniformly random subset of the prefill (a fixed random score per token and KV
    head, drawn once from the generator), the floor every selection method must beat."""

    batched = ("noise",)

    def __init__(self, cfg):
        self.cfg = cfg

    def prepare(self, keys, generator, directions=None):
        B, H, P, _ = keys.shape
        noise = torch.rand((B, H, P), generator=generator, device=gen_device(generator))
        return {"noise": noise.to(keys.device)}

    def score(self, q, meta, k):
        return meta["noise"], None


def make_method(cfg: BinaryPCConfig):
    """The selection method object named by ``cfg.method``."""
    return {
        "bpc": _BinaryPC,
        "oracle": _Oracle,
        "simhash": _SimHash,
        "magicpig": _MagicPIG,
        "quest": _Quest,
        "loki": _Loki,
        "streaming": _Streaming,
        "random": _Random,
    }[cfg.method](cfg)


def metadata_bytes(cfg: BinaryPCConfig, head_dim: int, key_bytes: int = 2) -> float:
    """Metadata read per token per KV head at each decode step (bytes)."""
    return {
        "bpc": math.ceil(cfg.bits / 8) + 0.0,
        "simhash": math.ceil(cfg.bits / 8) + 0.0,
        "magicpig": cfg.lsh_k * cfg.lsh_l / 8,
        "quest": 2 * head_dim * key_bytes / cfg.page,
        "loki": min(cfg.loki_rank, head_dim) * key_bytes + 0.0,
        "oracle": head_dim * key_bytes + 0.0,
        "streaming": 0.0,
        "random": 0.0,
    }[cfg.method]


def select_batch(method, meta: dict | None, idx: torch.Tensor) -> dict | None:
    """``meta`` with its batch rows re-indexed by ``idx`` (LongTensor of old row numbers): beam
    reordering, batch selection and repeat-interleave of a cache all reduce to this. Only the
    entries the method lists in ``batched`` carry a batch dimension (directions or hyperplanes
    shared by the batch, and scalars, are kept)."""
    if meta is None:
        return None
    out = dict(meta)
    for name in method.batched:
        t = meta[name]
        out[name] = t.index_select(0, idx.to(t.device))
    if "shape" in meta:
        out["shape"] = (int(idx.numel()), *meta["shape"][1:])
    out.pop("memo", None)
    for name in [n for n in out if n.startswith("_")]:  # per-step caches: rebuilt on demand
        del out[name]
    return out
