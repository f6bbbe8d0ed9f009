"""The health-check claim at tiny scale, through the real registry and runner (CI)."""

import pytest

from icml26 import claims_index
from icml26.core.claims import run_claim
from icml26.core.sanity import shuffle_within_windows, unigram_window_nll


def test_unigram_window_nll_matches_hand_count():
    import numpy as np
    import torch

    train = torch.tensor([0, 0, 1, 2])  # counts+1 over vocab 4: 3, 2, 2, 1 of 8
    test = torch.tensor([0, 1, 3, 0, 2])
    nll, n = unigram_window_nll(train, test, vocab_size=4, seq_len=3)
    p = np.array([3, 2, 2, 1]) / 8
    assert n.tolist() == [2, 1]
    assert nll == pytest.approx([-np.log(p[1]) - np.log(p[3]), -np.log(p[2])])


def test_shuffle_within_windows_keeps_each_windows_tokens():
    import torch

    ids = torch.arange(10)
    out = shuffle_within_windows(ids, seq_len=4, seed=0)
    for start in range(0, 10, 4):
        assert sorted(out[start : start + 4].tolist()) == ids[start : start + 4].tolist()
    assert not torch.equal(out, ids)


@pytest.mark.slow
def test_smollm2_perplexity_tiny_reproduces(tmp_path):
    rec = run_claim(claims_index.get("smollm2-perplexity"), scale="tiny", out_root=tmp_path)
    assert rec["error"] is None
    assert rec["verdict"] == "reproduced"
    model_ppl, unigram_ppl, shuffled_ppl = (row["perplexity"] for row in rec["rows"])
    assert 5 < model_ppl < 30 and unigram_ppl > 200
    assert shuffled_ppl > 5 * model_ppl
    checks = rec["power"]["checks"]
    assert [c["kind"] for c in checks] == ["control", "floor"]
    assert all(c["passed"] is True for c in checks)
    assert rec["power"]["passed"] is True
    assert (tmp_path / rec["figures"][0]).is_file()
