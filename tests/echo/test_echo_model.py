import pytest
import torch

from icml26.core.lm import tiny_llama
from icml26.echo.model import TreeLM, append_kv
from icml26.echo.tree import DraftTree


@pytest.fixture(scope="module")
def tiny():
    m, _ = tiny_llama(hidden=64, layers=3, heads=4, kv_heads=2, dtype=torch.float64, seed=0)
    return m, TreeLM(m)


def test_prefill_equals_hf_forward(tiny):
    m, lm = tiny
    ids = torch.arange(3, 30)
    ref = m(ids.view(1, -1)).logits[0]
    logits, _ = lm.prefill(ids)
    assert torch.allclose(logits.double(), ref, atol=1e-9)


def test_tree_forward_equals_each_path_run_alone(tiny):
    m, lm = tiny
    prefix = torch.arange(10, 22)
    _, cache = lm.prefill(prefix)
    tree = DraftTree.from_paths(7, {(5,): -0.1, (9,): -0.2, (5, 4): -0.3, (5, 6): -0.4, (5, 4, 8): -0.5})
    t = prefix.numel()
    mask = torch.cat([torch.ones(tree.size, t, dtype=torch.bool), tree.tree_mask()], 1).unsqueeze(0)
    logits, _ = lm.forward(torch.as_tensor(tree.tokens).view(1, -1), tree.position_ids(t).view(1, -1), mask, cache)
    for j in range(tree.size):  # brute force: the whole sequence prefix + root + path, HF forward
        seq = torch.cat([prefix, torch.tensor([7]), torch.tensor(tree.path(j), dtype=torch.int64)])
        ref = m(seq.view(1, -1)).logits[0, -1]
        assert torch.allclose(logits[0, j].double(), ref, atol=1e-9), j


def test_compacted_cache_equals_recomputed_prefix(tiny):
    m, lm = tiny
    prefix = torch.arange(40, 50)
    _, cache = lm.prefill(prefix)
    tree = DraftTree.from_paths(3, {(1,): -0.1, (2,): -0.2, (2, 5): -0.3, (1, 6): -0.4, (2, 5, 8): -0.5})
    t = prefix.numel()
    mask = torch.cat([torch.ones(tree.size, t, dtype=torch.bool), tree.tree_mask()], 1).unsqueeze(0)
    _, new = lm.forward(torch.as_tensor(tree.tokens).view(1, -1), tree.position_ids(t).view(1, -1), mask, cache)
    path = tree.ancestors(5)  # root -> (2,) -> (2,5) -> (2,5,8): non-contiguous columns
    compact = append_kv(cache, new, torch.as_tensor(path))
    seq = torch.cat([prefix, torch.as_tensor([int(tree.tokens[j]) for j in path])])
    _, ref = lm.prefill(seq)
    for (k, v), (rk, rv) in zip(compact, ref, strict=True):
        assert torch.allclose(k, rk, atol=1e-10) and torch.allclose(v, rv, atol=1e-10)


def test_self_draft_layers_and_bad_args(tiny):
    m, lm = tiny
    ids = torch.arange(5, 15)
    hid = m(ids.view(1, -1), output_hidden_states=True).hidden_states[2]  # after 2 layers
    ref = m.lm_head(m.model.norm(hid))[0]
    assert torch.allclose(lm.prefill(ids, 2)[0].double(), ref, atol=1e-9)
    with pytest.raises(ValueError, match="n_layers"):
        lm.prefill(ids, 4)
    with pytest.raises(ValueError, match="mask"):
        lm.forward(ids.view(1, -1), ids.view(1, -1), torch.ones(1, 3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="Llama-family"):
        TreeLM(torch.nn.Linear(2, 2))
