import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from icml26.uds.scores import (
    EmbeddingFIFO,
    FJLTProjector,
    compact_rows,
    gram,
    nuclear_norm,
    token_loss_and_gradnorm,
)
from icml26.uds.selectors import UDSSelector


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 12),
    v=st.integers(1, 40),
    rank=st.integers(0, 12),
    chunk=st.integers(1, 50),
    seed=st.integers(0, 2**16),
)
def test_gram_nuclear_norm_equals_svdvals(n, v, rank, chunk, seed):
    g = torch.Generator().manual_seed(seed)
    r = min(rank, n, v)
    x = torch.randn(n, r, generator=g, dtype=torch.float64) @ torch.randn(
        r, v, generator=g, dtype=torch.float64
    )
    ref = torch.linalg.svdvals(x).sum()
    got = nuclear_norm(x, chunk=chunk)
    # sqrt of a tiny eigenvalue amplifies rounding: eps ~ 1e-16 * ||x||^2 -> ~1e-8 * ||x||.
    assert float(got) == pytest.approx(float(ref), abs=1e-6 * (1 + float(x.norm())), rel=1e-9)
    torch.testing.assert_close(gram(x, chunk), gram(x, 10**6))


def test_nuclear_norm_batched_and_zero_rows_ignored():
    x = torch.randn(3, 5, 17, dtype=torch.float64)
    padded = torch.cat([x, torch.zeros(3, 4, 17, dtype=torch.float64)], 1)
    ref = torch.linalg.svdvals(x).sum(-1)
    torch.testing.assert_close(nuclear_norm(x, chunk=4), ref)
    torch.testing.assert_close(nuclear_norm(padded, chunk=4), ref)


def test_fjlt_matrix_route_equals_fft_and_is_seeded():
    x = torch.randn(2, 7, 53, dtype=torch.float64)
    p = FJLTProjector(53, 16, r_time=4, r_vocab=10, seed=3, dtype=torch.float64)
    torch.testing.assert_close(p.project(x, chunk=8), p.project_fft(x))
    q = FJLTProjector(53, 16, r_time=4, r_vocab=10, seed=3, dtype=torch.float64)
    torch.testing.assert_close(p.project(x), q.project(x))
    r = FJLTProjector(53, 16, r_time=4, r_vocab=10, seed=4, dtype=torch.float64)
    assert not torch.allclose(p.project(x), r.project(x))


def test_fjlt_distortion_of_pairwise_distances():
    g = torch.Generator().manual_seed(0)
    t, v = 32, 512
    x = torch.randn(24, t, v, generator=g, dtype=torch.float64)
    p = FJLTProjector(v, t, r_time=8, r_vocab=128, seed=1, dtype=torch.float64)
    e = p.project(x)
    iu = torch.triu_indices(24, 24, 1)
    d = torch.cdist(x.flatten(1), x.flatten(1))[iu[0], iu[1]]
    de = torch.cdist(e, e)[iu[0], iu[1]]
    scale = float((de * d).sum() / (d * d).sum())  # the unnormalized FFT scales all distances alike
    distortion = float(((de / (scale * d)) - 1).abs().mean())
    assert distortion <= 0.3
    # The official scaling keeps the squared norm at about (T V / 4) ||x||^2 (real parts: 1/2 each side).
    assert scale == pytest.approx(math.sqrt(t * v) / 2, rel=0.3)


def test_fifo_order_empty_and_distances():
    q = EmbeddingFIFO(3)
    e = torch.randn(2, 5)
    assert torch.equal(q.mean_distance(e), torch.zeros(2, dtype=torch.float64))
    items = [torch.full((1, 5), float(i)) for i in range(5)]
    for it in items:
        q.push(it)
    assert len(q) == 3
    torch.testing.assert_close(q.items, torch.cat(items[2:]))
    ref = np.mean([[np.linalg.norm(a - b) for b in q.items.numpy()] for a in e.numpy()], axis=1)
    np.testing.assert_allclose(q.mean_distance(e).numpy(), ref, rtol=1e-6)
    with pytest.raises(ValueError, match="queue_size"):
        EmbeddingFIFO(0)


def test_gradnorm_closed_form_equals_autograd():
    g = torch.Generator().manual_seed(0)
    n, h, v = 6, 5, 11
    hid = torch.randn(n, h, generator=g, dtype=torch.float64)
    w = torch.randn(v, h, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, v, (n,), generator=g)
    logits = hid @ w.T
    loss = torch.nn.functional.cross_entropy(logits, y)
    (grad,) = torch.autograd.grad(loss, w)
    got_loss, got_norm = token_loss_and_gradnorm(logits.detach(), y, hid, chunk=3)
    assert float(got_loss) == pytest.approx(float(loss.detach()), rel=1e-12)
    assert float(got_norm) == pytest.approx(float(grad.norm()), rel=1e-10)


# ---- batched scoring (issue 36): one padded (B, N, V) pass against a per-candidate reference ----


class _FixedLogits(torch.nn.Module):
    """A stand-in causal LM that returns fixed (B, T, V) logits, pad rows included."""

    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.fixed = logits
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # device lookup

    def forward(self, input_ids, attention_mask=None):
        return SimpleNamespace(logits=self.fixed)


def _ragged_batch(seed: int, b: int, t: int, v: int, side: str, dtype=torch.float64):
    """Random logits for every position (pad rows too, large, so scoring one would show) and a
    batch of ragged lengths with a prompt (labels -100) before each response, padded on ``side``."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, t, v, generator=g, dtype=torch.float64) * 3 - 1
    ids = torch.randint(0, v, (b, t), generator=g)
    attn = torch.zeros(b, t, dtype=torch.long)
    labels = torch.full((b, t), -100)
    for i in range(b):
        n = int(torch.randint(2, t + 1, (1,), generator=g))
        prompt = int(torch.randint(0, n - 1, (1,), generator=g))
        start = 0 if side == "right" else t - n
        attn[i, start : start + n] = 1
        labels[i, start + prompt : start + n] = ids[i, start + prompt : start + n]
        logits[i, :start] *= 50  # pad rows on the left
        logits[i, start + n :] *= 50  # and on the right
    labels[1] = -100  # a candidate with no scored token
    batch = {"input_ids": ids, "attention_mask": attn, "labels": labels}
    return logits.to(dtype), batch


def _reference_terms(logits: torch.Tensor, batch: dict, proj: FJLTProjector, queue: torch.Tensor):
    """Per candidate, float64: the rows t with attention_mask[t] and labels[t + 1] != -100;
    svdvals for the nuclear norm, the FFT route for the FJLT, numpy for the distances."""
    intra, emb = [], []
    for i in range(logits.shape[0]):
        keep = [
            t
            for t in range(logits.shape[1] - 1)
            if batch["attention_mask"][i, t] and batch["labels"][i, t + 1] != -100
        ]
        rows = logits[i, keep].double()
        intra.append(float(torch.linalg.svdvals(rows).sum()) if keep else 0.0)
        emb.append(proj.project_fft(rows[None])[0])
    emb = torch.stack(emb)
    q = queue.double().numpy()
    inter = [np.mean([np.linalg.norm(e - r) for r in q]) for e in emb.numpy()]
    return torch.tensor(intra, dtype=torch.float64), torch.tensor(inter), emb


def _uds_with_queue(v: int, t: int, queue: torch.Tensor) -> UDSSelector:
    sel = UDSSelector(max_len=t, r_time=4, r_vocab=16, seed=5, chunk=7, queue_size=64)
    sel.fifo.push(queue)
    return sel


@pytest.mark.parametrize("side", ["right", "left"])
def test_batched_uds_terms_equal_per_candidate_float64_reference(side):
    b, t, v = 6, 12, 37
    logits, batch = _ragged_batch(0, b, t, v, side)
    queue = torch.randn(5, 4 * 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    sel = _uds_with_queue(v, t, queue)
    intra, inter, emb = sel.terms(_FixedLogits(logits), batch)
    ref_intra, ref_inter, ref_emb = _reference_terms(logits, batch, sel.projector, queue)
    torch.testing.assert_close(intra, ref_intra, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(emb, ref_emb, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(inter, ref_inter, rtol=1e-9, atol=1e-9)
    assert intra[1] == 0 and not emb[1].any()  # no scored token: both terms of a zero matrix


class _Record(TorchDispatchMode):
    """Every aten call's name (``calls``) and outputs as (op name, dtype, shape) (``ops``)."""

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []
        self.ops: list[tuple[str, torch.dtype, tuple]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.calls.append(str(func))
        for x in tree_flatten(out)[0]:
            if isinstance(x, torch.Tensor):
                self.ops.append((str(func), x.dtype, tuple(x.shape)))
        return out


def test_uds_scoring_does_not_loop_over_candidates():
    """The same aten ops run for 3 and for 6 candidates: nothing is done once per candidate."""
    t, v = 12, 37
    queue = torch.randn(5, 64, dtype=torch.float64)
    counts = []
    for b in (3, 6):
        logits, batch = _ragged_batch(2, b, t, v, "right")
        sel = _uds_with_queue(v, t, queue)
        sel.terms(_FixedLogits(logits), batch)  # builds the projector's matrices
        with _Record() as rec:
            sel.terms(_FixedLogits(logits), batch)
        counts.append(len(rec.calls))
        assert sum("linalg_eigh" in op for op in rec.calls) == 1
    assert counts[0] == counts[1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_uds_terms_in_the_logits_dtype_match_float64(dtype):
    """fp32/bf16 logits: no float64 vocabulary chunk anywhere (float64 only for the (N, N) Gram
    sums, eigenvalues and distances); the projection's vocabulary-sized intermediates stay in
    the logits' dtype; the terms match the float64 reference on the same (rounded) values within
    the dtype's tolerance."""
    b, t, v, chunk = 5, 12, 300, 50  # chunk != the embedding size 64, so shapes tell them apart
    logits, batch = _ragged_batch(3, b, t, v, "left", dtype=dtype)
    queue = torch.randn(5, 64, generator=torch.Generator().manual_seed(4))
    sel = _uds_with_queue(v, t, queue)
    sel.chunk = chunk
    model = _FixedLogits(logits)
    sel.terms(model, batch)  # builds the projector's matrices for this dtype
    with _Record() as rec:
        intra, inter, emb = sel.terms(model, batch)
    chunk64 = [o for o in rec.ops if o[1] == torch.float64 and o[2] and o[2][-1] == chunk]
    assert chunk64 == []  # the old Gram made a float64 copy of every (n, chunk) block
    rows, _ = compact_rows(logits, torch.tensor(_scored_mask(batch)))
    with _Record() as proj_ops:
        sel.projector.project(rows, chunk)
    vocab_sized = [o for o in proj_ops.ops if o[2] and o[2][-1] == chunk]
    assert vocab_sized and all(o[1] == dtype for o in vocab_sized)  # no upcast chunk
    ref_intra, ref_inter, ref_emb = _reference_terms(logits, batch, sel.projector, queue)
    assert emb.dtype == torch.float32
    rtol = {torch.float32: 1e-5, torch.bfloat16: 1.5e-2}[dtype]  # bf16: ~4 ulps
    torch.testing.assert_close(intra, ref_intra, rtol=1e-6, atol=1e-6)  # fp32 Gram either way
    err = (emb.double() - ref_emb).norm(dim=-1) / ref_emb.norm(dim=-1).clamp_min(1e-12)
    assert float(err.max()) <= rtol
    torch.testing.assert_close(inter, ref_inter, rtol=rtol, atol=0)


def _scored_mask(batch: dict) -> list[list[bool]]:
    lab, attn = batch["labels"], batch["attention_mask"]
    return [
        [
            bool(t + 1 < lab.shape[1] and lab[i, t + 1] != -100 and attn[i, t])
            for t in range(lab.shape[1])
        ]
        for i in range(lab.shape[0])
    ]


def test_compact_rows_moves_selected_rows_first_and_zeros_the_rest():
    x = torch.arange(2 * 4 * 3, dtype=torch.float32).view(2, 4, 3) + 1
    mask = torch.tensor([[False, True, False, True], [True, True, True, False]])
    out, lengths = compact_rows(x, mask)
    assert lengths.tolist() == [2, 3] and out.shape == (2, 3, 3)
    torch.testing.assert_close(out[0], torch.stack([x[0, 1], x[0, 3], torch.zeros(3)]))
    torch.testing.assert_close(out[1], x[1, :3])
    empty, n0 = compact_rows(x, torch.zeros(2, 4, dtype=torch.bool))
    assert empty.shape == (2, 0, 3) and n0.tolist() == [0, 0]
    with pytest.raises(ValueError, match="mask"):
        compact_rows(x, mask[:, :3])
