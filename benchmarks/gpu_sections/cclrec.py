"""CCLRec: one training step (graph propagation + BPR + consensus-weighted InfoNCE + backward) on
the device against the CPU, and its cost against LightGCN's step.

Checks (random bipartite graph, 40 users x 30 items, 64-d semantics; one batch drawn once by the
CPU sampler and fed to both devices; float32 as the method trains):

- CCLRec loss and the gradients of every parameter (ID embeddings, text / profile maps), device vs
  CPU, within float32 accuracy of the reduction lengths; the same for LightGCN's BPR step;
- independent references on the CPU: CCLRec's ID propagation (user side then item side per layer,
  last layer softmaxed, layer mean) against dense float64 matrix products, and
  ``weighted_info_nce`` against the formula written out row by row in float64.

Timings (``paper``: a Netflix-sized random graph as in LLMRec — 13,187 users, 17,366 items,
~69k edges — 1536-d item semantics and user profiles, the official settings: 64-d, 2 layers,
batch 1,024 users x 2 samples, so the in-batch InfoNCE is a 2,048 x 4,096 matrix; ``tiny``: the
check's graph), ms per step (zero_grad, loss, backward, optimizer step; the batch is sampled
beforehand, since the sampler is CPU numpy by design and is timed separately as a value):

- CCLRec step (AdamW) vs LightGCN's step (3 layers, BPR on 2,048 interactions, Adam).

Paper memory: embeddings (13,187 + 17,366) x 64 float32 = 8 MB; propagated side vectors
(13,187 + 17,366) x 1536 x 2 float32 = 0.4 GB; CSR graphs < 2 MB; InfoNCE 2,048 x 4,096 float32
34 MB with its gradient -> < 1 GiB. CPU: the sampler's co-occurrence and per-user pools ~1-3 s.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import scipy.sparse as sp
import torch

from gpu_sections.cat import fp32_tol

WEIGHT = 1.0


def _graph(n_users: int, n_items: int, degree: int, seed: int) -> sp.csr_matrix:
    """(U, I) 0/1 CSR: ``degree`` random items per user (duplicates merged), every user >= 1."""
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(n_users), degree)
    cols = rng.integers(0, n_items, len(rows))
    r = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(n_users, n_items))
    r.data[:] = 1.0
    return r


def _setup(model, train, semantics=None):
    """What ``Recommender.fit`` does before its first pass; returns the parameters."""
    model.train_ = sp.csr_matrix(train, dtype=np.float32)
    model.n_users_, model.n_items_ = train.shape
    torch.manual_seed(model.seed)
    model._gen = torch.Generator(device="cpu").manual_seed(model.seed)
    params = model._setup(model.train_, semantics, {})
    model._params = list(params)
    return model._params


def _cclrec(train, sem, device, batch: int):
    from icml26.cclrec.model import CCLRec

    m = CCLRec(device=str(device), batch_size=batch)
    return m, _setup(m, train, sem)


def _lightgcn(train, device, batch: int):
    from icml26.cclrec.baselines import LightGCN

    m = LightGCN(device=str(device), batch_size=batch)
    return m, _setup(m, train)


def _loss_and_grads(model, params, batch):
    for p in params:
        p.grad = None
    loss = model._loss(batch)
    loss.backward()
    return loss.detach().cpu(), torch.cat([p.grad.detach().cpu().flatten() for p in params])


def _nce_ref(a, p, n, wp, wn, tau):
    """weighted_info_nce written out row by row, float64 (docstring formula)."""
    a, p, n, wp, wn = (t.double() for t in (a, p, n, wp, wn))
    cos = torch.nn.functional.cosine_similarity
    num = den = 0.0
    r_n = a.shape[0]
    for r in range(r_n):
        others = sum(torch.exp(cos(a[r], p[b, j], dim=0) / tau)
                     for b in range(r_n) if b != r for j in range(p.shape[1]))
        negs = sum(wn[r] * torch.exp(cos(a[r], n[r, j], dim=0) / tau) for j in range(n.shape[1]))
        for j in range(p.shape[1]):
            e = torch.exp(cos(a[r], p[r, j], dim=0) / tau)
            num = num - wp[r] * torch.log(e / (e + negs + others))
            den = den + wp[r]
    return num / den


def _check(ctx) -> None:
    from icml26.cclrec.model import weighted_info_nce

    train = _graph(40, 30, 5, seed=0)
    sem = np.random.default_rng(1).standard_normal((30, 64)).astype(np.float32)
    m_c, p_c = _cclrec(train, sem, ctx.cpu, batch=8)
    m_d, p_d = _cclrec(train, sem, ctx.device, batch=8)
    rng = np.random.default_rng(2)
    smp = m_c.sampler_.sample(rng.choice(m_c._users_with_hist, 8), rng)
    loss_c, grad_c = _loss_and_grads(m_c, p_c, smp)
    loss_d, grad_d = _loss_and_grads(m_d, p_d, smp)
    rows = len(smp.users) * smp.rand_pos.shape[1]  # InfoNCE anchors R = B x k
    ctx.close("CCLRec loss (BPR + L2 + weighted InfoNCE), device vs CPU", loss_d, loss_c,
              atol=fp32_tol(abs(float(loss_c)), 2 * rows + m_c.dim, 4),
              note=f"{rows} anchors, {len(p_c)} parameter tensors")
    ctx.close("CCLRec gradients of every parameter, device vs CPU", grad_d, grad_c,
              atol=fp32_tol(float(grad_c.abs().max()), 2 * rows + m_c.dim, 4))
    lg_c, q_c = _lightgcn(train, ctx.cpu, batch=64)
    lg_d, q_d = _lightgcn(train, ctx.device, batch=64)
    u, p, n = next(lg_c._batches(np.random.default_rng(3)))
    bl_c, bg_c = _loss_and_grads(lg_c, q_c, (u, p, n))
    bl_d, bg_d = _loss_and_grads(lg_d, q_d, tuple(t.to(ctx.device) for t in (u, p, n)))
    ctx.close("LightGCN BPR loss, device vs CPU", bl_d, bl_c,
              atol=fp32_tol(abs(float(bl_c)), len(u) + lg_c.dim, 4))
    ctx.close("LightGCN gradients, device vs CPU", bg_d, bg_c,
              atol=fp32_tol(float(bg_c.abs().max()), len(u) + lg_c.dim, 4))
    # independent: ID propagation with dense float64 matrices
    from icml26.cclrec.graph import bipartite_norm

    ui, iu = (torch.from_numpy(x.toarray()).double() for x in bipartite_norm(train, "official"))
    uu, ii = m_c._eu.detach().double(), m_c._ei.detach().double()
    us, its = [uu], [ii]
    for layer in range(m_c.n_layers):
        uu = ui @ ii
        uu = torch.softmax(uu, -1) if layer == m_c.n_layers - 1 else uu
        ii = iu @ uu
        ii = torch.softmax(ii, -1) if layer == m_c.n_layers - 1 else ii
        us.append(uu)
        its.append(ii)
    with torch.no_grad():
        got_u, got_i = m_c._id_embeddings()
    ref = torch.cat([torch.stack(us).mean(0).flatten(), torch.stack(its).mean(0).flatten()])
    ctx.close("CCLRec ID propagation vs dense float64 products (CPU)",
              torch.cat([got_u.flatten(), got_i.flatten()]), ref,
              atol=fp32_tol(float(ref.abs().max()), 40, m_c.n_layers))
    g = torch.Generator().manual_seed(4)
    a, pos, neg = (torch.randn(*s, generator=g) for s in ((6, 8), (6, 2, 8), (6, 2, 8)))
    wp, wn = 1 + 2 * torch.rand(6, generator=g), 1 + 9 * torch.rand(6, generator=g)
    got = weighted_info_nce(a, pos, neg, wp, wn, tau=0.1)
    ref = _nce_ref(a, pos, neg, wp, wn, 0.1)
    ctx.close("weighted_info_nce vs the formula row by row (float64, CPU)", got, ref,
              atol=fp32_tol(abs(float(ref)), 24, 1))


def _timings(ctx, n_users, n_items, degree, d_sem, batch, lg_batch) -> None:
    train = _graph(n_users, n_items, degree, seed=0)
    rng = np.random.default_rng(1)
    sem = rng.standard_normal((n_items, d_sem)).astype(np.float32)
    t0 = time.perf_counter()
    m, params = _cclrec(train, sem, ctx.device, batch)
    ctx.value("CCLRec setup (sampler pools on the CPU, side vectors to the device)",
              f"{time.perf_counter() - t0:.2f} s for {n_users} users x {n_items} items, "
              f"{train.nnz} edges")
    users = rng.choice(m._users_with_hist, batch)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        smp = m.sampler_.sample(users, rng)
        times.append((time.perf_counter() - t0) * 1e3)
    ctx.value("CCLRec sampler per batch (CPU numpy, not in the step timing)",
              f"{statistics.median(times):.1f} ms for {batch} users")
    opt = m._optimizer(params)
    lg, lg_params = _lightgcn(train, ctx.device, lg_batch)
    lg_opt = lg._optimizer(lg_params)
    lg_batch_t = next(lg._batches(np.random.default_rng(2)))

    def step(model, optim, b):
        def f():
            optim.zero_grad(set_to_none=True)
            model._loss(b).backward()
            optim.step()
        return f

    warm, iters = (3, 10) if ctx.scale == "paper" else (1, 2)
    ctx.compare(f"CCLRec step, {batch} users x 2 samples ({n_users}x{n_items} graph)",
                f"LightGCN step ({lg_batch} interactions)", step(lg, lg_opt, lg_batch_t),
                step(m, opt, smp), warmup=warm, iters=iters,
                note="propagation + loss + backward + optimizer step; batch pre-sampled")


def run(ctx) -> None:
    with ctx.exact():
        _check(ctx)
    ctx.pick(tiny=lambda: _timings(ctx, 40, 30, 5, 64, 8, 64),
             paper=lambda: _timings(ctx, 13187, 17366, 5, 1536, 1024, 2048))()
