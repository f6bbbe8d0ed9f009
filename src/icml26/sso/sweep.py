"""Run many :func:`~icml26.sso.train.train` jobs, in this process or in a pool of workers.

Each job is ``(TrainConfig, ArmSpec)``; every worker holds the same train/validation blocks and
uses ``threads`` torch threads. Results come back as the history dicts of ``train``. Workers are
spawned (not forked) so that no OpenMP state is shared.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
from collections.abc import Callable, Sequence

import torch

from icml26.sso.train import ArmSpec, TrainConfig, train

__all__ = ["Sweep"]

_DATA: dict = {}


def _init_worker(train_blocks, val_blocks, threads: int, vocab: str, device: str) -> None:
    torch.set_num_threads(threads)
    _DATA.update(train=train_blocks, val=val_blocks, vocab=vocab, device=device)


def _job(cfg: TrainConfig, arm: ArmSpec) -> dict:
    return train(cfg, arm, _DATA["train"], _DATA["val"], vocab=_DATA["vocab"],
                 device=_DATA["device"])


class Sweep:
    """A job runner: ``run([(cfg, arm), ...]) -> [history, ...]`` in order.

    ``jobs=1`` trains in this process; ``jobs>1`` uses a spawned process pool created on first
    use and kept until :meth:`close` (or the ``with`` block ends). ``on_done(steps)`` is called
    after each finished job with its step count (for progress bars).
    """

    def __init__(self, train_blocks: torch.Tensor, val_blocks: torch.Tensor, *, jobs: int = 1,
                 threads: int = 1, vocab: str = "bytes", device: str = "cpu",
                 on_done: Callable[[int], None] | None = None):
        if jobs < 1 or threads < 1:
            raise ValueError(f"jobs and threads must be >= 1; got {jobs}, {threads}")
        self.train_blocks, self.val_blocks = train_blocks, val_blocks
        self.jobs, self.threads, self.vocab, self.device = jobs, threads, vocab, device
        self.on_done = on_done or (lambda n: None)
        self._pool: cf.ProcessPoolExecutor | None = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def run(self, jobs: Sequence[tuple[TrainConfig, ArmSpec]]) -> list[dict]:
        if self.jobs == 1:
            out = []
            for cfg, arm in jobs:
                out.append(train(cfg, arm, self.train_blocks, self.val_blocks, vocab=self.vocab,
                                 device=self.device))
                self.on_done(cfg.steps)
            return out
        if self._pool is None:
            self._pool = cf.ProcessPoolExecutor(
                max_workers=self.jobs, mp_context=mp.get_context("spawn"),
                initializer=_init_worker,
                initargs=(self.train_blocks, self.val_blocks, self.threads, self.vocab,
                          self.device))
        futures = {self._pool.submit(_job, cfg, arm): cfg.steps for cfg, arm in jobs}
        for fut in cf.as_completed(futures):
            fut.result()  # raise a worker's error here, at once
            self.on_done(futures[fut])
        return [f.result() for f in futures]
