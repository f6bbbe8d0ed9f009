"""UDS scoring math as pure functions (Zou et al., ICML 2026, "Utility-Diversity Aware Online
Batch Selection for LLM Supervised Fine-tuning"; official code gfyddha/UDS).

For one candidate with scored logits ``L`` of shape (n, V) (n scored tokens, V vocabulary):

- intra-sample score ``s_intra = ||L||_* = sum_j sigma_j(L)`` (utility and intra-sample
  diversity), computed as ``sum sqrt(eig(L L^T))`` on the (n, n) Gram matrix accumulated over
  vocabulary chunks in float64, never an (n, V) SVD;
- inter-sample score ``s_inter`` = mean Euclidean distance from the candidate's bilinear fast
  Johnson-Lindenstrauss embedding ``E = S_t^T L S_v`` (r_time x r_vocab) to a FIFO of the
  embeddings of past *selected* samples (0 while the FIFO is empty);
- ``s = s_intra + alpha * s_inter``; keep the top K.

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


def gram(logits: torch.Tensor, chunk: int = DEFAULT_CHUNK) -> torch.Tensor:
    """``L L^T`` in float64 for logits of shape (..., n, V), accumulated over vocabulary chunks.

    Only a (..., n, chunk) float64 slice is materialized at a time. Returns (..., n, n) float64.
    """
    n, v = logits.shape[-2], logits.shape[-1]
    out = logits.new_zeros((*logits.shape[:-2], n, n), dtype=torch.float64)
    for a, b in _chunks(v, chunk):
        part = logits[..., a:b].to(torch.float64)
        out += part @ part.transpose(-1, -2)
    return out


def nuclear_norm(logits: torch.Tensor, chunk: int = DEFAULT_CHUNK) -> torch.Tensor:
    """Nuclear norm ``sum_j sigma_j`` of each (n, V) matrix, via the Gram route (float64).

    ``logits``: (..., n, V), any float dtype. Returns (...) float64. Zero rows (masked tokens)
    add only zero singular values, so the result ignores them exactly.
    """
    if logits.shape[-2] == 0:
        return logits.new_zeros(logits.shape[:-2], dtype=torch.float64)
    eig = torch.linalg.eigvalsh(gram(logits, chunk))
    return eig.clamp_min(0).sqrt().sum(-1)


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
        dtype: torch.dtype = torch.float32,
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
        g = torch.Generator().manual_seed(seed)
        self.sign_vocab = torch.randint(0, 2, (vocab,), generator=g).double() * 2 - 1
        self.sign_time = torch.randint(0, 2, (max_len,), generator=g).double() * 2 - 1
        if replace:
            self.idx_vocab = torch.randint(0, vocab, (r_vocab,), generator=g)
            self.idx_time = torch.randint(0, max_len, (r_time,), generator=g)
        else:
            self.idx_vocab = torch.randperm(vocab, generator=g)[:r_vocab]
            self.idx_time = torch.randperm(max_len, generator=g)[:r_time]
        self.cos_vocab = _cos_matrix(
            self.sign_vocab, self.idx_vocab, math.sqrt(vocab / r_vocab)
        ).to(device, dtype)
        self.cos_time = _cos_matrix(self.sign_time, self.idx_time, math.sqrt(max_len / r_time)).to(
            device, dtype
        )

    @property
    def dim(self) -> int:
        return self.r_time * self.r_vocab

    def project(self, logits: torch.Tensor, chunk: int = DEFAULT_CHUNK) -> torch.Tensor:
        """(B, n, V) logits whose n <= max_len rows sit at time positions 0..n-1 (the rest of the
        T rows are zero) -> (B, r_time * r_vocab) embeddings in the projector's dtype."""
        if logits.shape[-1] != self.vocab:
            raise ValueError(
                f"logits have vocabulary {logits.shape[-1]}, projector expects {self.vocab}"
            )
        n = logits.shape[-2]
        if n > self.max_len:
            raise ValueError(f"sequence of {n} scored tokens exceeds max_len={self.max_len}")
        cv = self.cos_vocab
        right = logits.new_zeros(
            (*logits.shape[:-1], self.r_vocab), dtype=cv.dtype
        )  # (B, n, r_vocab)
        for a, b in _chunks(self.vocab, chunk):
            right += logits[..., a:b].to(cv.dtype) @ cv[a:b]
        out = self.cos_time[:n].transpose(0, 1) @ right  # (B, r_time, r_vocab)
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
