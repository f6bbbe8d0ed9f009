"""Function-preserving input transforms for a linear layer ``y = W x``: Hadamard rotations,
SmoothQuant scales and the Concentration-Alignment Transform (CAT).

Convention: a transform ``T`` (d, d) maps the input ``x -> x' = T x`` and the weight
``W -> W' = W T^{-1}``, so ``W' x' = W x`` exactly. Everything here is float64 math on
``torch`` tensors; :mod:`icml26.cat.model` applies the results to a network.

Devices: Hadamard matrices are built on the CPU (the same signs whatever the default device);
the transform constructors work on the device of their statistics (``sigma``, the weights), and
:class:`BlockTransform` applies its blocks on the device of the tensor it is given (``apply``:
the activation's, ``inverse_into``: the weight's), so CPU-built transforms serve a model on a GPU.

The alignment objective (docs/cat.md, eq. A) is ``J(T) = ||W T^{-1}||_F^2 * tr(T Sigma T^T)``;
the SQNR's alignment term is ``d * tr(W Sigma W^T) / J(T)`` (the numerator does not depend on T).
With ``P = T^T T``, ``J = tr(G P^{-1}) tr(Sigma P)`` with ``G = W^T W``; its minimum over P is
``||W Sigma^{1/2}||_*^2``, reached at the matrix geometric mean ``P* = Sigma^{-1} # G``
(eq. B). Any ``T = Q P*^{1/2}`` with orthogonal Q is optimal, so Q (a Hadamard) is left free to
improve concentration. Block CAT restricts T to be block diagonal and solves eq. B per block.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = [
    "hadamard",
    "random_hadamard",
    "sym_sqrt",
    "sym_inv_sqrt",
    "geometric_mean_alignment",
    "alignment_objective",
    "nuclear_bound",
    "cat_transform",
    "smoothquant_transform",
    "hadamard_transform",
    "BlockTransform",
]

_F64 = torch.float64


# ----------------------------------------------------------------------------- Hadamard matrices


_CPU = torch.device("cpu")


def _sylvester(n: int) -> torch.Tensor:
    h = torch.ones(1, 1, dtype=_F64, device=_CPU)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def _is_prime(q: int) -> bool:
    return q > 1 and all(q % p for p in range(2, int(math.isqrt(q)) + 1))


def _paley1(q: int) -> torch.Tensor:
    """Paley construction I: a Hadamard matrix of order q+1 for a prime q = 3 (mod 4)."""
    residues = {(i * i) % q for i in range(1, q)}
    chi = [0] + [1 if i in residues else -1 for i in range(1, q)]
    s = torch.tensor(
        [[chi[(j - i) % q] for j in range(q)] for i in range(q)], dtype=_F64, device=_CPU
    )
    c = torch.zeros(q + 1, q + 1, dtype=_F64, device=_CPU)
    c[0, 1:] = 1
    c[1:, 0] = -1
    c[1:, 1:] = s
    return c + torch.eye(q + 1, dtype=_F64, device=_CPU)


def hadamard(n: int) -> torch.Tensor:
    """An unnormalised Hadamard matrix (n, n) float64 (on the CPU) of +-1 entries with
    ``H^T H = n I``.

    Built as a Kronecker product of a Sylvester matrix (power of two) and Paley-I matrices of
    order q+1 (q prime, q = 3 mod 4: 4, 8, 12, 20, 24, ...). 576 = 12*12*4, 1536 = 12*128.
    Raises ValueError for orders this construction cannot reach (e.g. odd n > 1).
    """
    if n < 1:
        raise ValueError(f"Hadamard order must be >= 1; got {n}")
    # find Paley factors (q+1) whose product times a power of two is n.
    factors: list[int] = []
    rest = n
    while rest & (rest - 1):  # not a power of two yet
        for q in range(3, rest, 4):
            if _is_prime(q) and rest % (q + 1) == 0 and (q + 1) & q:  # q+1 not a power of 2
                factors.append(q)
                rest //= q + 1
                break
        else:
            raise ValueError(
                f"no Hadamard matrix of order {n} from Sylvester x Paley-I factors; use a block "
                f"size that is a power of two (e.g. 64) or a multiple of 12 times one"
            )
    h = _sylvester(rest)
    for q in factors:
        h = torch.kron(h, _paley1(q))
    return h


def random_hadamard(
    n: int, seed: int = 0, device: torch.device | str | None = None
) -> torch.Tensor:
    """An orthogonal (n, n) float64 matrix ``H diag(s) / sqrt(n)`` with random signs ``s``
    (the randomized Hadamard of QuaRot). Built on the CPU (the signs come from a CPU generator
    seeded with ``seed``, so every device gets the same matrix), then moved to ``device``."""
    g = torch.Generator(device=_CPU).manual_seed(seed)
    signs = torch.randint(0, 2, (n,), generator=g, device=_CPU).to(_F64) * 2 - 1
    h = hadamard(n) * signs / math.sqrt(n)
    return h if device is None else h.to(device)


# ------------------------------------------------------------------------ the alignment optimum


def _eigh(a: torch.Tensor, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    a = (a + a.T) / 2
    w, v = torch.linalg.eigh(a)
    if w[0] <= 0:
        raise ValueError(
            f"{what} is not positive definite: smallest eigenvalue {float(w[0]):.3e}; "
            f"raise `damp` or use more calibration tokens"
        )
    return w, v


def sym_sqrt(a: torch.Tensor, what: str = "matrix") -> torch.Tensor:
    """Symmetric square root of an SPD matrix (float64)."""
    w, v = _eigh(a.to(_F64), what)
    return (v * w.sqrt()) @ v.T


def sym_inv_sqrt(a: torch.Tensor, what: str = "matrix") -> torch.Tensor:
    """Symmetric inverse square root of an SPD matrix (float64)."""
    w, v = _eigh(a.to(_F64), what)
    return (v * w.rsqrt()) @ v.T


def geometric_mean_alignment(gram: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """``P* = Sigma^{-1/2} (Sigma^{1/2} G Sigma^{1/2})^{1/2} Sigma^{-1/2}`` (eq. B), (d, d) float64.

    The minimiser of ``tr(G P^{-1}) tr(Sigma P)``; at it both traces equal
    ``tr((Sigma^{1/2} G Sigma^{1/2})^{1/2}) = ||W Sigma^{1/2}||_*``.
    """
    s_half = sym_sqrt(sigma, "activation covariance")
    s_ihalf = sym_inv_sqrt(sigma, "activation covariance")
    gram = gram.to(device=s_half.device, dtype=_F64)
    middle = sym_sqrt(s_half @ gram @ s_half, "Sigma^1/2 G Sigma^1/2")
    p = s_ihalf @ middle @ s_ihalf
    return (p + p.T) / 2


def alignment_objective(weight: torch.Tensor, sigma: torch.Tensor, t: torch.Tensor) -> float:
    """``J(T) = ||W T^{-1}||_F^2 tr(T Sigma T^T)`` for W (m, d), Sigma (d, d), T (d, d)."""
    w = weight.to(_F64)
    t = t.to(device=w.device, dtype=_F64)
    wt = torch.linalg.solve(t.T, w.T).T  # W T^{-1}
    return float(wt.pow(2).sum() * torch.trace(t @ sigma.to(device=w.device, dtype=_F64) @ t.T))


def nuclear_bound(weight: torch.Tensor, sigma: torch.Tensor, block: int | None = None) -> float:
    """The smallest ``J`` reachable with a full (``block=None``) or block-diagonal T:
    ``(sum_k ||W_{:,k} Sigma_kk^{1/2}||_*)^2``."""
    w = weight.to(_F64)
    s = sigma.to(device=w.device, dtype=_F64)
    d = w.shape[1]
    b = d if block is None else block
    total = 0.0
    for k in range(0, d, b):
        sk = sym_sqrt(s[k : k + b, k : k + b], "activation covariance block")
        total += float(torch.linalg.matrix_norm(w[:, k : k + b] @ sk, ord="nuc"))
    return total**2


# -------------------------------------------------------------------------------- transforms


class BlockTransform:
    """A block-diagonal transform: ``blocks`` (n, b, b) float64; T = blockdiag(blocks).

    ``apply(x)`` computes ``x T^T`` for x (..., n*b); ``inverse_into(W)`` computes ``W T^{-1}``.
    A diagonal transform is stored with b = 1. ``kind`` names where it came from.
    ``orthogonal``: every block is orthogonal (a (randomized) Hadamard), so ``T^{-1} = T^T``
    and :meth:`inverse_blocks` transposes instead of inverting. ``blocks`` stay where they were
    built (the CPU for the Hadamard constructors, Sigma's device for :func:`cat_transform`, the
    weights' for :func:`smoothquant_transform`); both products run on their argument's device.
    """

    def __init__(self, blocks: torch.Tensor, kind: str = "custom", orthogonal: bool = False) -> None:
        if blocks.dim() != 3 or blocks.shape[1] != blocks.shape[2]:
            raise ValueError(f"blocks must have shape (n, b, b); got {tuple(blocks.shape)}")
        self.blocks = blocks.to(_F64)
        self.kind = kind
        self.orthogonal = bool(orthogonal)
        # (m, m) orthogonal matrix mixing the consumer's output rows (QuaRot's residual rotation
        # seen from one layer); only :class:`icml26.cat.sqnr.SQNRStats` uses it.
        self.out_rotation: torch.Tensor | None = None

    @property
    def dim(self) -> int:
        return self.blocks.shape[0] * self.blocks.shape[1]

    @property
    def block(self) -> int:
        return self.blocks.shape[1]

    def to(self, device: torch.device | str) -> BlockTransform:
        """The same transform (kind, orthogonality, output rotation) with its tensors on
        ``device``; ``self`` when they are there already."""
        device = torch.device(device)
        if self.blocks.device == device and (
            self.out_rotation is None or self.out_rotation.device == device
        ):
            return self
        out = BlockTransform(self.blocks.to(device), self.kind, self.orthogonal)
        if self.out_rotation is not None:
            out.out_rotation = self.out_rotation.to(device)
        return out

    def dense(self) -> torch.Tensor:
        """T as a dense (d, d) float64 matrix."""
        return torch.block_diag(*self.blocks)

    def inverse_blocks(self) -> torch.Tensor:
        """The blocks of ``T^{-1}`` (n, b, b) float64, on the blocks' device: their transposes
        when the transform is orthogonal, else ``torch.linalg.inv``."""
        if self.orthogonal:
            return self.blocks.transpose(-1, -2)
        return torch.linalg.inv(self.blocks)

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """``x T^T`` for x (..., d), in x's dtype and on x's device."""
        n, b, _ = self.blocks.shape
        xb = x.reshape(*x.shape[:-1], n, b)  # (..., n, b)
        blocks = self.blocks.to(device=x.device, dtype=x.dtype)
        out = torch.einsum("...nj,nij->...ni", xb, blocks)
        return out.reshape(x.shape)

    def inverse_into(self, weight: torch.Tensor) -> torch.Tensor:
        """``W T^{-1}`` for W (m, d), float64, on W's device (the inverse is formed where the
        blocks live, then moved: every device multiplies by the same ``T^{-1}``)."""
        n, b, _ = self.blocks.shape
        inv = self.inverse_blocks().to(weight.device)  # (n, b, b)
        wb = weight.to(_F64).reshape(weight.shape[0], n, b)  # (m, n, b)
        return torch.einsum("mnj,nji->mni", wb, inv).reshape(weight.shape[0], -1)


def _check_block(d: int, block: int | None, layer: str) -> int:
    b = d if block is None else int(block)
    if b < 1 or d % b:
        valid = [k for k in (1, 2, 4, 8, 16, 32, 64, 128, 192, 256, 576, d) if d % k == 0]
        raise ValueError(
            f"block {block} does not divide the input width {d} of {layer}; valid sizes include "
            f"{sorted(set(valid))}"
        )
    return b


def cat_transform(
    weights: Sequence[torch.Tensor],
    sigma: torch.Tensor,
    block: int | None = 64,
    damp: float = 1e-3,
    hadamard: bool = True,
    seed: int = 0,
    layer: str = "layer",
) -> BlockTransform:
    """Block CAT for linears sharing one input: ``T_k = Q_k P_k^{1/2}`` per block (eq. B).

    weights: the (m_i, d) weights that consume the input; their Gram ``G = sum_i W_i^T W_i``.
    sigma: (d, d) activation second moment ``E[x x^T]`` (not centred), float64; the math runs
    on its device and the blocks stay there.
    block: block size b (must divide d); ``None`` = the full d x d transform.
    damp: ``eps`` in ``Sigma + eps * mean(diag Sigma) I`` (and the same for G).
    hadamard: Q = a randomized Hadamard of order b (``seed``), else Q = I.
    """
    d = sigma.shape[0]
    b = _check_block(d, block, layer)
    if damp < 0:
        raise ValueError(f"damp must be >= 0; got {damp}")
    dev = sigma.device  # the transform is computed (and its blocks kept) where Sigma lives
    gram = sum(w.to(device=dev, dtype=_F64).T @ w.to(device=dev, dtype=_F64) for w in weights)
    if gram.shape != (d, d):
        raise ValueError(f"{layer}: weights have {gram.shape[0]} inputs, Sigma has {d}")
    s = sigma.to(_F64)
    s = s + damp * torch.diagonal(s).mean() * torch.eye(d, dtype=_F64, device=dev)
    gram = gram + damp * torch.diagonal(gram).mean() * torch.eye(d, dtype=_F64, device=dev)
    q = (
        random_hadamard(b, seed, device=dev)
        if hadamard and b > 1
        else torch.eye(b, dtype=_F64, device=dev)
    )
    blocks = []
    for k in range(0, d, b):
        p = geometric_mean_alignment(gram[k : k + b, k : k + b], s[k : k + b, k : k + b])
        blocks.append(q @ sym_sqrt(p, f"{layer} CAT block {k // b}"))
    return BlockTransform(torch.stack(blocks), kind=f"cat-b{b}")


def smoothquant_transform(
    weights: Sequence[torch.Tensor],
    act_absmax: torch.Tensor,
    alpha: float = 0.5,
    eps: float = 1e-8,
) -> BlockTransform:
    """SmoothQuant scales as a diagonal transform: ``x'_j = x_j / s_j``, ``W'_{:,j} = W_{:,j} s_j``
    with ``s_j = max|x_j|^alpha / max_i |W_{ij}|^(1-alpha)`` (Xiao et al., 2023, eq. 4).

    act_absmax: (d,) per-channel max |x| over calibration tokens. Returns T = diag(1/s), on the
    weights' device.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1]; got {alpha}")
    w_absmax = torch.stack([w.to(_F64).abs().amax(0) for w in weights]).amax(0)
    a = act_absmax.to(device=w_absmax.device, dtype=_F64).clamp_min(eps)
    s = a.pow(alpha) / w_absmax.clamp_min(eps).pow(1 - alpha)
    s = s.clamp_min(eps)
    return BlockTransform((1.0 / s).reshape(-1, 1, 1), kind=f"smoothquant-a{alpha:g}")


def hadamard_transform(d: int, block: int | None = None, seed: int = 0) -> BlockTransform:
    """A randomized Hadamard rotation of the input (QuaRot-style, local to the layer): one
    order-d matrix (``block=None``) or the same order-b matrix on every block."""
    b = _check_block(d, block, "hadamard rotation")
    h = random_hadamard(b, seed)
    return BlockTransform(h.expand(d // b, b, b).clone(), kind=f"hadamard-b{b}", orthogonal=True)
