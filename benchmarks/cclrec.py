"""CCLRec/LightGCN building blocks: sparse vs dense propagation, chunked vs naive ranking.

Run: ``.venv/bin/python benchmarks/cclrec.py [--users 20000] [--items 4000] [--degree 20]
[--device cpu] [--plot results/benchmarks/cclrec.png]``. A synthetic bipartite graph
(``--degree`` random items per user) is built; timed side by side in one process:

- 3-layer LightGCN propagation, forward + backward, with (a) :class:`SparseOp` (CSR forward and a
  precomputed CSR transpose for the backward), (b) torch's COO ``sparse.mm``, (c) dense ``mm`` on
  the dense normalised matrix (skipped when it would exceed ``--dense-gb``);
- full-ranking top-20 for every user: (a) chunked scoring (1,024 users at a time, what
  ``evaluate`` does), (b) one naive (U, I) score matrix; peak extra memory is computed from the
  shapes (float32).

Prints markdown rows for benchmarks/RESULTS.md. Target (issue 18): sparse >= 5x dense.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from icml26.cclrec.graph import bipartite_norm, lightgcn_propagate, to_torch_sparse
from icml26.cclrec.metrics import topk_masked


def _time(fn, reps=3):
    fn()  # warm-up
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, default=20000)
    ap.add_argument("--items", type=int, default=4000)
    ap.add_argument("--degree", type=int, default=20)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dense-gb", type=float, default=2.0)
    ap.add_argument("--plot", default="results/benchmarks/cclrec.png")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    rows = np.repeat(np.arange(a.users), a.degree)
    cols = rng.integers(0, a.items, len(rows))
    r = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(a.users, a.items))
    r.data[:] = 1
    ui, iu = bipartite_norm(r, "sym")
    dev = a.device
    eu = torch.randn(a.users, a.dim, device=dev, requires_grad=True)
    ei = torch.randn(a.items, a.dim, device=dev, requires_grad=True)

    def prop(op_ui, op_iu):
        def f():
            u, i = lightgcn_propagate(op_ui, op_iu, eu, ei, 3)
            (u.sum() + i.sum()).backward()
            if dev.startswith("cuda"):
                torch.cuda.synchronize()

        return f

    res = {}
    res["SparseOp (CSR + CSR transpose)"] = _time(
        prop(to_torch_sparse(ui, dev), to_torch_sparse(iu, dev))
    )

    def coo(m):
        c = m.tocoo()
        t = torch.sparse_coo_tensor(np.vstack([c.row, c.col]), c.data, c.shape, device=dev)
        t = t.coalesce()
        return lambda x: torch.sparse.mm(t, x)

    res["torch COO sparse.mm"] = _time(prop(coo(ui), coo(iu)))
    gb = 2 * a.users * a.items * 4 / 1e9
    if gb <= a.dense_gb:
        du = torch.tensor(ui.toarray(), device=dev)
        di = torch.tensor(iu.toarray(), device=dev)
        res["dense mm"] = _time(prop(lambda x: du @ x, lambda x: di @ x), reps=1)
        del du, di
    with torch.no_grad():
        ue, ie = eu.detach(), ei.detach()
        masks = [r.indices[r.indptr[u] : r.indptr[u + 1]] for u in range(a.users)]

        def chunked():
            for s in range(0, a.users, 1024):
                topk_masked(ue[s : s + 1024] @ ie.T, masks[s : s + 1024], 20)

        def naive():
            topk_masked(ue @ ie.T, masks, 20)

        t_chunk, t_naive = _time(chunked, 1), _time(naive, 1)
    mem_chunk = 1024 * a.items * 4 * 2 / 1e6
    mem_naive = a.users * a.items * 4 * 2 / 1e6
    base = res["SparseOp (CSR + CSR transpose)"]
    print(f"\n{a.users} users x {a.items} items, {r.nnz} edges, dim {a.dim}, device {dev}\n")
    print("| cclrec: 3-layer propagation fwd+bwd | s | vs SparseOp |\n|---|---|---|")
    for k, v in res.items():
        print(f"| {k} | {v:.4f} | {v / base:.1f}x |")
    print("\n| cclrec: top-20 for all users | s | peak score memory (MB) |\n|---|---|---|")
    print(f"| chunked (1,024 users) | {t_chunk:.3f} | {mem_chunk:.0f} |")
    print(f"| naive (U x I matrix) | {t_naive:.3f} | {mem_naive:.0f} |")
    if a.plot:
        from icml26.core.plots import pyplot, save_figure

        plt = pyplot()
        fig, ax = plt.subplots(1, 2, figsize=(9, 3.2))
        ax[0].bar(range(len(res)), list(res.values()), color="tab:blue")
        ax[0].set_xticks(range(len(res)), [k.split(" (")[0] for k in res], fontsize=8)
        ax[0].set_ylabel("s (3 layers, fwd+bwd)")
        ax[0].set_yscale("log")
        ax[1].bar([0, 1], [mem_chunk, mem_naive], color=["tab:green", "tab:red"])
        ax[1].set_xticks([0, 1], ["chunked", "naive"])
        ax[1].set_ylabel("peak score memory (MB)")
        fig.suptitle(f"{a.users} users x {a.items} items, {r.nnz} edges")
        Path(a.plot).parent.mkdir(parents=True, exist_ok=True)
        print("figure:", save_figure(fig, a.plot))


if __name__ == "__main__":
    main()
