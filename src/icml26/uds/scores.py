"""UDS scoring math as pure functions (Zou et al., ICML 2026, "Utility-Diversity Aware Online
Batch Selection for LLM Supervised Fine-tuning"; official code gfyddha/UDS).

For one candidate with scored logits ``L`` of shape (n, V) (n scored tokens, V vocabulary):

- intra-sample score ``s_intra = ||L||_* = sum_j sigma_j(L)`` (utility and intra-sample
  diversity), computed as ``sum sqrt(eig(L L^T))`` on the (n, n) Gram matrix, accumulated over
  vocabulary chunks (fp32 products, float64 only for the (n, n) sum and its eigenvalues), never
  an (n, V) SVD;
- inter-sample score ``s_inter`` = mean Euclidean distance from the candidate's bilinear fast
  Johnson-Lindenstrauss embedding ``E = S_t^T L S_v`` (r_time x r_vocab) to a FIFO of the
  embeddings of past *selected* samples (0 while the FIFO is empty);
- ``s = s_intra + alpha * s_inter``; keep the top K.

Candidates are scored together (:func:`uds_terms`): per vocabulary chunk their scored rows are
gathered into one padded (B, N, chunk) block; padding slots are masked (a zero row adds nothing to
``L L^T`` or to the embedding), so every term is that of the candidate's own (n_i, V) matrix.

Also: per-sample mean token loss (MaxLoss) and the closed-form per-sample gradient norm of the
LM-head weight (GradNorm), both computed chunk-wise over the vocabulary.
"""

from __future__ import annotations

import math

import torch

DEFAULT_CHUNK = 8192


def _chunks(v: int, chunk: int):
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1; got {chunk}")
    for start in range(0, v, chunk):
        yield start, min(start + chunk, v)


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 for float64 inputs, else float32 (what chunk products are summed in)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def gram(logits: torch.Tensor, chunk: int = DEFAULT_CHUNK) -> torch.Tensor:
    """``L L^T`` for logits of shape (..., n, V), accumulated over vocabulary chunks.

    Each chunk's product is formed in float32 (float64 for float64 logits; bf16/fp16 chunks are
    raised to float32, whose mantissa the Gram needs: on random 64 x 8192 bf16 logits a bf16 Gram
    moved the nuclear norm by 4e-3 relative, a float32 one by 1e-6) and added into a (..., n, n)
    float64 sum; no float64 vocabulary chunk is ever made. Returns (..., n, n) float64.
    """
    n, v = logits.shape[-2], logits.shape[-1]
    work = _acc_dtype(logits.dtype)
    out = logits.new_zeros((*logits.shape[:-2], n, n), dtype=torch.float64)
    for a, b in _chunks(v, chunk):
        part = logits[..., a:b].to(work)  # (..., n, chunk); no copy for float32 logits
        out += (part @ part.transpose(-1, -2)).double()
    return out


def nuclear_norm(logits: torch.Tensor, chunk: int = DEFAULT_CHUNK) -> torch.Tensor:
    """Nuclear norm ``sum_j sigma_j`` of each (n, V) matrix, via the Gram route.

    ``logits``: (..., n, V), any float dtype; batch several candidates by zero-padding their rows
    (:func:`compact_rows`). Returns (...) float64. Zero rows (masked tokens) add only zero
    singular values, so the result ignores them exactly.
    """
    return _nuclear_from_gram(gram(logits, chunk))


def _nuclear_from_gram(g: torch.Tensor) -> torch.Tensor:
    """``sum sqrt(eig(G))`` of (..., n, n) float64 Gram matrices (clamped at 0) -> (...)."""
    if g.shape[-1] == 0:
        return g.new_zeros(g.shape[:-2])
    return torch.linalg.eigvalsh(g).clamp_min(0).sqrt().sum(-1)


def _scored_index(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For a (B, T) bool mask: ``order`` (B, N) the selected positions first, in sequence order
    (padding slots repeat the row's first position), ``keep`` (B, N) bool, ``lengths`` (B,)."""
    lengths = mask.sum(1)
    n = int(lengths.max()) if lengths.numel() else 0
    # a stable sort of "not selected" puts the selected positions first, in sequence order
    order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)[:, :n]  # (B, N)
    keep = torch.arange(n, device=mask.device)[None, :] < lengths[:, None]  # (B, N)
    return torch.where(keep, order, order[:, :1]), keep, lengths


def compact_rows(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Move each row's selected positions to the front, in order, and zero the rest.

    ``x``: (B, T, ...) ; ``mask``: (B, T) bool. Returns ``(out, lengths)``: ``out`` (B, N, ...)
    with N = max(lengths), ``out[i, :lengths[i]] = x[i, mask[i]]`` and zeros after;
    ``lengths`` (B,) long. (:func:`uds_terms` does this chunk by chunk instead, without the copy.)
    """
    if mask.shape != x.shape[:2]:
        raise ValueError(f"mask {tuple(mask.shape)} does not match x {tuple(x.shape[:2])}")
    order, keep, lengths = _scored_index(mask.to(device=x.device, dtype=torch.bool))
    out = x[torch.arange(x.shape[0], device=x.device)[:, None], order]  # (B, N, ...)
    out.masked_fill_(~keep.view(*keep.shape, *([1] * (x.dim() - 2))), 0)
    return out, lengths


class FJLTProjector:
    """Bilinear fast JL transform of a (T, V) logits matrix to (r_time, r_vocab), as the official
    code does it (unnormalized FFT, real part, random rows/columns, scaled by sqrt(V/r_vocab) and
    sqrt(T/r_time)), written as two dense cosine matrices so that it can be accumulated over
    vocabulary chunks: ``Re(FFT(d * x))[k] = sum_v x_v d_v cos(2 pi k v / V)``.

    Args:
        vocab: V. max_len: T, the length every sequence is zero-padded to (rows beyond the
            scored tokens are zero). r_time, r_vocab: output sizes (official 8 and 128).
        seed: draws the +-1 signs and the selected frequencies once (a torch.Generator).
        replace: draw the frequencies with replacement (the official ``randint``); default False.
        dtype: the dtype the projection runs in; None (default) follows the logits (bf16 logits
            are projected in bf16), a dtype casts each vocabulary chunk to it.
        device: where the cosine matrices are first built (they follow the logits anyway).
    """

    def __init__(
        self,
        vocab: int,
        max_len: int,
        r_time: int = 8,
        r_vocab: int = 128,
        *,
        seed: int = 0,
        replace: bool = False,
        dtype: torch.dtype | None = None,
        device: str | torch.device = "cpu",
    ):
        for name, value in (
            ("vocab", vocab),
            ("max_len", max_len),
            ("r_time", r_time),
            ("r_vocab", r_vocab),
        ):
            if value < 1:
                raise ValueError(f"{name} must be >= 1; got {value}")
        if not replace and (r_vocab > vocab or r_time > max_len):
            raise ValueError(
                f"without replacement r_vocab <= vocab and r_time <= max_len; got r_vocab={r_vocab}, "
                f"vocab={vocab}, r_time={r_time}, max_len={max_len}"
            )
        self.vocab, self.max_len, self.r_time, self.r_vocab = vocab, max_len, r_time, r_vocab
        self.dtype = dtype
        g = torch.Generator().manual_seed(seed)
        self.sign_vocab = torch.randint(0, 2, (vocab,), generator=g).double() * 2 - 1
        self.sign_time = torch.randint(0, 2, (max_len,), generator=g).double() * 2 - 1
        if replace:
            self.idx_vocab = torch.randint(0, vocab, (r_vocab,), generator=g)
            self.idx_time = torch.randint(0, max_len, (r_time,), generator=g)
        else:
            self.idx_vocab = torch.randperm(vocab, generator=g)[:r_vocab]
            self.idx_time = torch.randperm(max_len, generator=g)[:r_time]
        self._mats: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        if dtype is not None:
            self.cos_matrices(dtype, device)

    @property
    def dim(self) -> int:
        return self.r_time * self.r_vocab

    def cos_matrices(self, dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos_vocab (V, r_vocab), cos_time (T, r_time)) in ``dtype`` on ``device``, built once
        from float64 cosines and cached per (dtype, device)."""
        key = (dtype, str(torch.device(device)))
        if key not in self._mats:
            cv = _cos_matrix(self.sign_vocab, self.idx_vocab, math.sqrt(self.vocab / self.r_vocab))
            ct = _cos_matrix(self.sign_time, self.idx_time, math.sqrt(self.max_len / self.r_time))
            self._mats[key] = (cv.to(device, dtype), ct.to(device, dtype))
        return self._mats[key]

    def check(self, vocab: int, n: int) -> None:
        """ValueError unless the logits have this vocabulary and n <= max_len scored rows."""
        if vocab != self.vocab:
            raise ValueError(f"logits have vocabulary {vocab}, projector expects {self.vocab}")
        if n > self.max_len:
            raise ValueError(f"sequence of {n} scored tokens exceeds max_len={self.max_len}")

    def project(self, logits: torch.Tensor, chunk: int = DEFAULT_CHUNK) -> torch.Tensor:
        """(B, n, V) logits whose n <= max_len rows sit at time positions 0..n-1 (the rest of the
        T rows are zero; zero-padded rows of a batch are exact) -> (B, r_time * r_vocab).

        Computed as ``(C_t[:n]^T L) C_v`` over vocabulary chunks, time side first (r_time << n, so
        r_vocab / r_time = 16 x fewer multiply-adds than ``L C_v`` first at the official sizes).
        Chunks stay in the projection dtype (the logits' own by default: no float32/64 copy of a
        bf16 chunk); only the (B, r_time, r_vocab) sum is float32 (float64 for float64 logits),
        which is the returned dtype.
        """
        n = logits.shape[-2]
        self.check(logits.shape[-1], n)
        work = self.dtype or logits.dtype
        cv, ct = self.cos_matrices(work, logits.device)
        left = ct[:n].transpose(0, 1)  # (r_time, n)
        out = logits.new_zeros(
            (*logits.shape[:-2], self.r_time, self.r_vocab), dtype=_acc_dtype(work)
        )
        for a, b in _chunks(self.vocab, chunk):
            part = logits[..., a:b].to(work)  # (B, n, chunk); a view unless dtype was forced
            out += (left @ part) @ cv[a:b]  # (B, r_time, chunk) @ (chunk, r_vocab)
        return out.flatten(-2)

    def project_fft(self, logits: torch.Tensor) -> torch.Tensor:
        """Reference route with ``torch.fft`` on the zero-padded (B, T, V) tensor (for tests)."""
        b, n, v = logits.shape
        x = logits.new_zeros((b, self.max_len, v), dtype=torch.float64)
        x[:, :n] = logits.double()
        x = torch.fft.fft(x * self.sign_vocab, dim=-1).real[..., self.idx_vocab] * math.sqrt(
            v / self.r_vocab
        )
        x = x * self.sign_time.view(1, -1, 1)
        x = torch.fft.fft(x, dim=1).real[:, self.idx_time] * math.sqrt(self.max_len / self.r_time)
        return x.flatten(-2)


def _cos_matrix(sign: torch.Tensor, idx: torch.Tensor, scale: float) -> torch.Tensor:
    n = sign.numel()
    pos = torch.arange(n, dtype=torch.float64)
    # (k * v) mod n keeps the angle argument small, so float64 cosines stay exact at V ~ 1e5.
    phase = (pos[:, None] * idx[None, :].double()) % n
    return sign[:, None] * torch.cos(2 * math.pi * phase / n) * scale  # (n, r)


def uds_terms(
    logits: torch.Tensor, mask: torch.Tensor, projector: FJLTProjector, chunk: int = DEFAULT_CHUNK
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Nuclear norm and FJLT embedding of B candidates at once, in one pass over the vocabulary.

    ``logits``: (B, T, V) any float dtype; ``mask``: (B, T) bool, the rows to score (candidate
    i's ``mask[i].sum()`` rows, taken in sequence order and placed at time positions 0..n_i-1).
    Per vocabulary chunk the scored rows are gathered into a (B, N, chunk) block (N = the most
    scored rows; no (B, N, V) copy), which feeds both the Gram (float32 products, float64 sums)
    and the projection (in the projector's dtype, by default the logits'). Padding slots of a
    shorter candidate are masked out: their Gram rows and columns are zeroed and their time
    weights are 0, so each candidate's terms are those of its own (n_i, V) matrix.

    Returns ``(nuclear (B,) float64, embeddings (B, r_time * r_vocab), lengths (B,) long)``;
    the embeddings are float32 (float64 for float64 logits).
    """
    if logits.dim() != 3 or mask.shape != logits.shape[:2]:
        raise ValueError(
            f"expected logits (B, T, V) and mask (B, T); got {tuple(logits.shape)}, "
            f"{tuple(mask.shape)}"
        )
    bsz, t, v = logits.shape
    order, keep, lengths = _scored_index(mask.to(device=logits.device, dtype=torch.bool))
    n = order.shape[1]
    projector.check(v, n)
    gram_dt = _acc_dtype(logits.dtype)
    proj_dt = projector.dtype or logits.dtype
    cv, ct = projector.cos_matrices(proj_dt, logits.device)
    left = (ct[:n] * keep[..., None].to(proj_dt)).transpose(1, 2)  # (B, r_time, N); pads weigh 0
    flat = (order + torch.arange(bsz, device=logits.device)[:, None] * t).reshape(-1)  # (B * N,)
    rows = logits.reshape(bsz * t, v)
    g = logits.new_zeros((bsz, n, n), dtype=torch.float64)
    emb = logits.new_zeros((bsz, projector.r_time, projector.r_vocab), dtype=_acc_dtype(proj_dt))
    for a, b in _chunks(v, chunk):
        part = rows[:, a:b].index_select(0, flat).view(bsz, n, b - a)  # (B, N, chunk)
        p = part.to(gram_dt)  # no copy for float32 / float64 logits
        g += (p @ p.transpose(-1, -2)).double()
        emb += (left @ part.to(proj_dt)) @ cv[a:b]  # (B, r_time, chunk) @ (chunk, r_vocab)
    g.masked_fill_(~(keep[:, :, None] & keep[:, None, :]), 0)
    return _nuclear_from_gram(g), emb.flatten(-2), lengths


class EmbeddingFIFO:
    """A FIFO of the last ``size`` selected embeddings, shape (count, dim), oldest first."""

    def __init__(self, size: int = 1024):
        if size < 1:
            raise ValueError(f"queue_size must be >= 1; got {size}")
        self.size = size
        self._items: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self._items is None else self._items.shape[0]

    @property
    def items(self) -> torch.Tensor | None:
        return self._items

    def push(self, emb: torch.Tensor) -> None:
        """Append (k, dim) embeddings; drop the oldest beyond ``size``."""
        emb = emb.detach()
        self._items = emb if self._items is None else torch.cat([self._items, emb.to(self._items)])
        self._items = self._items[-self.size :]

    def mean_distance(self, emb: torch.Tensor) -> torch.Tensor:
        """Mean Euclidean distance of each (B, dim) row to the queue; zeros when empty."""
        if self._items is None:
            return emb.new_zeros(emb.shape[0], dtype=torch.float64)
        return torch.cdist(emb.double(), self._items.double()).mean(-1)


def all_gather_rows(x: torch.Tensor, group=None) -> torch.Tensor:
    """Concatenate every rank's (k_r, ...) rows in rank order (rank 0's first); ranks may hold
    different k_r. Without an initialised ``torch.distributed`` (or with one rank) returns ``x``.

    Two collectives: the row counts and widths, then the rows padded to the largest count. Every
    rank must call it (it is collective); a rank with no rows passes ``(0, dim)`` or, not knowing
    ``dim``, ``(0, 0)``. Under NCCL ``x`` must be on the rank's CUDA device.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return x
    world = dist.get_world_size(group)
    if world == 1:
        return x
    if x.dim() != 2:
        raise ValueError(f"all_gather_rows takes (k, dim) rows; got shape {tuple(x.shape)}")
    # (rows, width) per rank; a rank with nothing to send may pass (0, 0): it learns the width
    meta = torch.tensor([x.shape[0], x.shape[1]], device=x.device, dtype=torch.long)
    metas = [torch.empty_like(meta) for _ in range(world)]
    dist.all_gather(metas, meta, group=group)
    sizes = [int(m[0]) for m in metas]
    widths = {int(m[1]) for m, k in zip(metas, sizes, strict=True) if k > 0}
    if len(widths) > 1:
        raise ValueError(f"all_gather_rows: ranks send rows of different widths {sorted(widths)}")
    width = widths.pop() if widths else x.shape[1]
    padded = x.new_zeros((max(sizes), width))
    padded[: x.shape[0]] = x
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded.contiguous(), group=group)
    return torch.cat([p[:k] for p, k in zip(parts, sizes, strict=True)])


def token_loss_and_gradnorm(
    logits: torch.Tensor,
    targets: torch.Tensor,
    hidden: torch.Tensor | None = None,
    chunk: int = DEFAULT_CHUNK,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Mean token cross-entropy of one sample and, given the LM-head inputs, the Frobenius norm of
    the LM-head weight gradient of that mean loss, in closed form.

    ``logits``: (n, V) scored rows; ``targets``: (n,) long; ``hidden``: (n, H) LM-head inputs.
    With ``A = softmax(L) - onehot(y)``, ``grad W = A^T H / n`` and
    ``||grad W||_F^2 = sum((A A^T) * (H H^T)) / n^2``; ``A A^T`` is accumulated over chunks.
    Returns float64 scalars (loss, grad-norm or None).
    """
    n, v = logits.shape
    if n == 0:
        zero = logits.new_zeros((), dtype=torch.float64)
        return zero, (zero if hidden is not None else None)
    lse = torch.full((n,), -math.inf, dtype=torch.float64, device=logits.device)
    for a, b in _chunks(v, chunk):
        lse = torch.logaddexp(lse, torch.logsumexp(logits[:, a:b].double(), -1))
    picked = logits.gather(1, targets[:, None]).squeeze(1).double()
    loss = (lse - picked).mean()
    if hidden is None:
        return loss, None
    aat = torch.zeros((n, n), dtype=torch.float64, device=logits.device)
    for a, b in _chunks(v, chunk):
        p = torch.exp(logits[:, a:b].double() - lse[:, None])
        inside = (targets >= a) & (targets < b)
        rows = torch.nonzero(inside).squeeze(1)
        p[rows, targets[rows] - a] -= 1.0
        aat += p @ p.T
    h = hidden.double()
    sq = (aat * (h @ h.T)).sum() / n**2
    return loss, sq.clamp_min(0).sqrt()
