"""UDS under torch.distributed: every rank's FIFO holds every rank's picks (2 gloo processes)."""

import socket
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from icml26.uds.scores import all_gather_rows
from icml26.uds.selectors import UDSSelector

B, T, V = 4, 10, 29


class _RankLogits(torch.nn.Module):
    """Fixed random logits per (rank, step): each rank scores different candidates."""

    def __init__(self):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.logits = None

    def forward(self, input_ids, attention_mask=None):
        return SimpleNamespace(logits=self.logits)


def _batch(rank: int, step: int) -> tuple[torch.Tensor, dict]:
    g = torch.Generator().manual_seed(100 * rank + step)
    logits = torch.randn(B, T, V, generator=g, dtype=torch.float64)
    ids = torch.randint(0, V, (B, T), generator=g)
    return logits, {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}


def _worker(rank: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        model = _RankLogits()
        sel = UDSSelector(max_len=T, r_time=4, r_vocab=8, seed=0, queue_size=16)
        local = []
        for step in range(2):
            model.logits, batch = _batch(rank, step)
            k = 1 + rank  # ranks may keep different numbers of picks
            emb = sel.terms(model, batch)[2]
            chosen = sel.select(model, batch, k)
            local.append(emb[chosen])
        # ragged all-gather on its own: rank r sends r + 1 rows of value r
        rows = all_gather_rows(torch.full((rank + 1, 2), float(rank)))
        # a step where rank 1 scored nothing: it must still take part (no hang), and both FIFOs
        # get rank 0's pick
        if rank == 0:
            model.logits, batch = _batch(rank, 2)
            emb = sel.terms(model, batch)[2]
            chosen = sel.select(model, batch, 1)
            local.append(emb[chosen])
        else:
            sel.observe(torch.zeros(0, dtype=torch.long))
        torch.save({"fifo": sel.fifo.items, "local": local, "rows": rows}, f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_fifo_is_all_gathered_across_ranks(tmp_path):
    mp.spawn(_worker, args=(_free_port(), str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1))
    assert torch.equal(r0["fifo"], r1["fifo"])
    # rank order within a step, steps in order: r0 step 0, r1 step 0, r0 step 1, r1 step 1
    expected = torch.cat([r0["local"][0], r1["local"][0], r0["local"][1], r1["local"][1],
                          r0["local"][2]])
    assert r0["fifo"].shape[0] == 2 * (1 + 2) + 1
    torch.testing.assert_close(r0["fifo"], expected.to(r0["fifo"]))
    assert torch.equal(r0["rows"], torch.tensor([[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]))
    assert torch.equal(r0["rows"], r1["rows"])


def test_without_distributed_the_fifo_is_local():
    assert not dist.is_initialized()
    x = torch.randn(3, 2)
    assert all_gather_rows(x) is x
