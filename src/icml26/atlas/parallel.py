"""Many adaptive tests at once: in this process, in N local processes, or as Ray tasks.

Adaptive tests are independent per model, so a batch of them splits into chunks of models, one
task per chunk. Model ``m`` (its row in the responses) always uses seed ``seed + m``, whatever the
backend and the chunking, so every backend returns the same results (a test checks this).

``jobs``: ``None`` or ``1`` runs here; an int ``N > 1`` uses N spawned local processes (each with
one BLAS thread); ``"ray"`` starts or joins a local Ray, ``"ray://HOST:PORT"`` a Ray cluster
(``pip install 'icml26[ray]'``). A task ships the bank and its rows of the response matrix and
returns plain dicts.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os

import numpy as np

from icml26.atlas.bank import ItemBank
from icml26.core.errors import UserError

__all__ = ["run_tests", "parse_jobs"]


def parse_jobs(jobs) -> int | str | None:
    """``None``/``1`` → in process; an int or digit string ≥ 2 → processes; ``ray``/``ray://…``."""
    if jobs is None:
        return None
    if isinstance(jobs, str):
        s = jobs.strip()
        if s == "ray" or s.startswith("ray://"):
            return s
        if not s.isdigit():
            raise UserError(
                f"--jobs must be a number of processes, 'ray' or 'ray://HOST:PORT'; got {jobs!r}"
            )
        jobs = int(s)
    if int(jobs) < 1:
        raise UserError(f"--jobs must be >= 1; got {jobs}")
    return None if int(jobs) == 1 else int(jobs)


def _chunk_worker(bank: ItemBank, matrix: np.ndarray, start: int, kw: dict) -> list[dict]:
    """Adaptive tests of rows ``start, start+1, ...`` (global indices set the seeds)."""
    from icml26.atlas.cat import AdaptiveTest

    seed = kw.pop("seed", 123)
    out = []
    for k, answers in enumerate(matrix):
        cat = AdaptiveTest(bank, seed=seed + start + k, allowed=~np.isnan(answers), **kw)
        res = cat.run_indices(np.nan_to_num(answers).astype(int))
        out.append(
            {
                "theta": float(res.theta),
                "se": float(res.se),
                "items": res.n_items,
                "acc_hat": float(res.acc_hat),
                "administered": res.items,
                "trace": res.trace,
            }
        )
    return out


def _init_worker() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:  # pragma: no cover - torch is a dependency
        pass


def run_tests(
    bank: ItemBank,
    matrix: np.ndarray,
    jobs=None,
    chunk: int | None = None,
    seed: int = 123,
    **cat_kw,
) -> list[dict]:
    """One adaptive test per row of ``matrix`` (models x bank items; 0/1, NaN = no answer).

    Returns one dict per row (theta, se, items, acc_hat, administered ids, trace), in row order.
    ``cat_kw`` goes to :class:`~icml26.atlas.cat.AdaptiveTest` (se_stop, min_items, ...).
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[1] != bank.n_items:
        raise UserError(
            f"responses must be (models, {bank.n_items}) aligned to the bank; got {matrix.shape}"
        )
    backend = parse_jobs(jobs)
    from icml26.atlas.cat import AdaptiveTest

    AdaptiveTest(bank, **cat_kw)  # bad settings fail here, before any task starts
    kw = dict(cat_kw, seed=int(seed))
    T = matrix.shape[0]
    if backend is None or T == 0:
        return _chunk_worker(bank, matrix, 0, kw)
    n_workers = backend if isinstance(backend, int) else None
    size = chunk or max(1, -(-T // (4 * (n_workers or 8))))
    starts = list(range(0, T, size))
    if isinstance(backend, int):
        ctx = multiprocessing.get_context("spawn")
        with cf.ProcessPoolExecutor(backend, mp_context=ctx, initializer=_init_worker) as pool:
            futs = [
                pool.submit(_chunk_worker, bank, matrix[s : s + size], s, dict(kw)) for s in starts
            ]
            parts = [f.result() for f in futs]
    else:
        parts = _ray_chunks(backend, bank, matrix, starts, size, kw)
    return [r for part in parts for r in part]


def _ray_chunks(address: str, bank, matrix, starts, size, kw) -> list[list[dict]]:
    try:
        import ray
    except ImportError as exc:
        raise UserError("--jobs ray needs Ray: pip install 'icml26[ray]'") from exc
    started = False
    if not ray.is_initialized():
        ray.init(
            address=None if address == "ray" else address,
            include_dashboard=False,
            log_to_driver=False,
        )
        started = True
    try:
        task = ray.remote(num_cpus=1)(_chunk_worker)
        bank_ref = ray.put(bank)
        refs = [task.remote(bank_ref, matrix[s : s + size], s, dict(kw)) for s in starts]
        return ray.get(refs)
    finally:
        if started:
            ray.shutdown()
