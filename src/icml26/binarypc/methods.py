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

from icml26.binarypc.codes import binary_pcs, hash_keys, pack_signs, recon_error
from icml26.binarypc.select import code_scores, lut_scores

__all__ = ["METHODS", "BinaryPCConfig", "make_method", "metadata_bytes"]

METHODS = ("bpc", "oracle", "simhash", "quest", "streaming")


@dataclass(frozen=True)
class BinaryPCConfig:
    """Settings of the patch; defaults are the official code's.

    method: one of METHODS. bits: code width (1..64). iters: alternations per direction.
    mask_out: share of the context dropped (0.98 keeps 2%). min_remain: budget floor (tokens).
    token_budget: fixed budget instead of mask_out/min_remain. err_ratio: share of the budget given
    to the worst-reconstructed keys (BinaryPC only). dense_layers: layer indices kept dense.
    min_context: contexts shorter than this stay dense. quantize: int8 query projection.
    directions: optional offline directions tensor (n_layers, Hkv, bits, D) instead of online ones.
    page: Quest page size. sinks/window: StreamingLLM. seed: random directions / hyperplanes.
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


class _BinaryPC:
    def __init__(self, cfg: BinaryPCConfig):
        self.cfg = cfg

    def prepare(self, keys, generator, directions=None):
        k32 = keys.to(torch.float32)
        if directions is None:
            V = binary_pcs(k32, self.cfg.bits, self.cfg.iters, generator=generator)
        else:  # (Hkv, bits, D) offline
            V = directions.to(device=keys.device, dtype=torch.float32).expand(
                keys.shape[0], -1, -1, -1
            )
        codes = hash_keys(k32, V)
        return {"V": V, "codes": codes, "err": recon_error(k32, codes, V)}

    def score(self, q, meta, k):
        s = code_scores(q, meta["codes"], meta["V"], quantize=self.cfg.quantize)
        n_err = min(int(round(self.cfg.err_ratio * k)), s.shape[-1])
        forced = None
        if n_err > 0:
            worst = torch.topk(meta["err"], n_err, dim=-1).indices
            forced = torch.zeros_like(s, dtype=torch.bool).scatter_(-1, worst, True)
        return s, forced


class _Oracle:
    """Exact top-k: max over the group of the true softmax weight (full-context normalizer)."""

    def __init__(self, cfg):
        self.cfg = cfg

    def prepare(self, keys, generator, directions=None):
        return {"keys": keys}

    def score(self, q, meta, k):
        K = meta["keys"].to(torch.float32)
        B, Hq, D = q.shape
        Hkv = K.shape[1]
        logits = torch.einsum("bhgd,bhld->bhgl", q.reshape(B, Hkv, Hq // Hkv, D).float(), K)
        return logits.amax(2), None


class _SimHash:
    """64 random hyperplanes (same 8 B/token); score = bits − 2·Hamming(code(q), code(k))."""

    def __init__(self, cfg):
        self.cfg = cfg

    def prepare(self, keys, generator, directions=None):
        D = keys.shape[-1]
        R = torch.randn((D, self.cfg.bits), generator=generator, dtype=torch.float32).to(
            keys.device
        )
        codes = pack_signs(torch.where(keys.float() @ R >= 0, 1.0, -1.0))
        return {"R": R, "codes": codes}

    def score(self, q, meta, k):
        B, Hq, D = q.shape
        Hkv = meta["codes"].shape[1]
        p = torch.where(q.float() @ meta["R"] >= 0, 1.0, -1.0)
        s = lut_scores(p, meta["codes"])
        return s.reshape(B, Hkv, Hq // Hkv, -1).amax(2), None


class _Quest:
    """Pages of ``page`` tokens; page score = Σ_d max(q_d·min_d, q_d·max_d) (an upper bound on
    q·k in the page), max over the group; each token gets its page's score."""

    def __init__(self, cfg):
        self.cfg = cfg

    def prepare(self, keys, generator, directions=None):
        B, H, P, D = keys.shape
        pg = self.cfg.page
        n = math.ceil(P / pg)
        pad = n * pg - P
        k = keys.float()
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
        qg = q.reshape(B, Hkv, Hq // Hkv, 1, D).float()
        ub = torch.maximum(qg * meta["lo"][:, :, None], qg * meta["hi"][:, :, None]).sum(-1)
        ps = ub.amax(2)  # (B, Hkv, n)
        s = ps.repeat_interleave(self.cfg.page, dim=-1)[..., : meta["P"]]
        # within a page prefer later tokens so partial pages are filled contiguously
        return s, None


class _Streaming:
    """``sinks`` first tokens plus the most recent ones."""

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


def make_method(cfg: BinaryPCConfig):
    """The selection method object named by ``cfg.method``."""
    return {
        "bpc": _BinaryPC,
        "oracle": _Oracle,
        "simhash": _SimHash,
        "quest": _Quest,
        "streaming": _Streaming,
    }[cfg.method](cfg)


def metadata_bytes(cfg: BinaryPCConfig, head_dim: int, key_bytes: int = 2) -> float:
    """Metadata read per token per KV head at each decode step (bytes)."""
    return {
        "bpc": math.ceil(cfg.bits / 8) + 0.0,
        "simhash": math.ceil(cfg.bits / 8) + 0.0,
        "quest": 2 * head_dim * key_bytes / cfg.page,
        "oracle": head_dim * key_bytes + 0.0,
        "streaming": 0.0,
    }[cfg.method]
