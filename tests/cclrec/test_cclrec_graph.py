import numpy as np
import scipy.sparse as sp
import torch

from icml26.cclrec.graph import bipartite_norm, cooccurrence, lightgcn_propagate, to_torch_sparse


def _toy(seed=0, u=7, i=9, p=0.35):
    rng = np.random.default_rng(seed)
    r = (rng.random((u, i)) < p).astype(np.float32)
    r[0, 0] = 1
    return sp.csr_matrix(r)


def test_sparse_propagation_matches_dense_float64():
    r = _toy()
    ui, iu = bipartite_norm(r, "sym")
    g = torch.Generator().manual_seed(0)
    eu = torch.randn(7, 5, generator=g, requires_grad=True)
    ei = torch.randn(9, 5, generator=g, requires_grad=True)
    ue, ie = lightgcn_propagate(to_torch_sparse(ui), to_torch_sparse(iu), eu, ei, 3)
    # dense float64 reference on the full (U+I) adjacency D^-1/2 A D^-1/2
    R = r.toarray().astype(np.float64)
    A = np.block([[np.zeros((7, 7)), R], [R.T, np.zeros((9, 9))]])
    d = A.sum(1)
    inv = np.where(d > 0, d**-0.5, 0)
    An = inv[:, None] * A * inv[None, :]
    E = np.vstack([eu.detach().double().numpy(), ei.detach().double().numpy()])
    layers = [E]
    for _ in range(3):
        layers.append(An @ layers[-1])
    ref = np.mean(layers, 0)
    np.testing.assert_allclose(ue.detach().numpy(), ref[:7], atol=1e-6)
    np.testing.assert_allclose(ie.detach().numpy(), ref[7:], atol=1e-6)
    # gradients through the custom CSR backward match the dense one
    (ue.sum() * 2 + (ie**2).sum()).backward()
    Et = torch.tensor(E, requires_grad=True)
    x, outs = Et, [Et]
    for _ in range(3):
        x = torch.tensor(An) @ x
        outs.append(x)
    m = torch.stack(outs).mean(0)
    (m[:7].sum() * 2 + (m[7:] ** 2).sum()).backward()
    np.testing.assert_allclose(eu.grad.numpy(), Et.grad[:7].numpy(), atol=1e-5)
    np.testing.assert_allclose(ei.grad.numpy(), Et.grad[7:].numpy(), atol=1e-5)


def test_sym_norm_spectrum_at_most_one():
    ui, _ = bipartite_norm(_toy(1, 12, 15), "sym")
    s = np.linalg.svd(ui.toarray(), compute_uv=False)  # eigenvalues of the block matrix are ±s
    assert s.max() <= 1 + 1e-6
    assert abs(s.max() - 1) < 1e-5  # a connected bipartite graph has top eigenvalue exactly 1


def test_official_norm_scales_rows_only():
    r = _toy(2)
    ui, iu = bipartite_norm(r, "official")
    R = r.toarray()
    np.testing.assert_allclose(
        ui.toarray(), R / np.sqrt(np.maximum(R.sum(1, keepdims=True), 1e-12)), rtol=1e-6
    )
    np.testing.assert_allclose(
        iu.toarray(), R.T / np.sqrt(np.maximum(R.T.sum(1, keepdims=True), 1e-12)), rtol=1e-6
    )


def test_cooccurrence_brute_force():
    r = _toy(3)
    c = cooccurrence(r).toarray()
    R = r.toarray()
    for a in range(R.shape[1]):
        for b in range(R.shape[1]):
            want = 0 if a == b else float(np.sum(R[:, a] * R[:, b]))
            assert c[a, b] == want
