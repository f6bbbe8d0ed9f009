"""The health-check claim at tiny scale, through the real registry and runner (CI)."""

import pytest

from icml26 import claims_index
from icml26.core.claims import run_claim
from icml26.core.sanity import unigram_window_nll


def test_unigram_window_nll_matches_hand_count():
    import numpy as np
    import torch

    train = torch.tensor([0, 0, 1, 2])  # counts+1 over vocab 4: 3, 2, 2, 1 of 8
    test = torch.tensor([0, 1, 3, 0, 2])
    nll, n = unigram_window_nll(train, test, vocab_size=4, seq_len=3)
    p = np.array([3, 2, 2, 1]) / 8
    assert n.tolist() == [2, 1]
    assert nll == pytest.approx([-np.log(p[1]) - np.log(p[3]), -np.log(p[2])])


@pytest.mark.slow
def test_smollm2_perplexity_tiny_reproduces(tmp_path):
    rec = run_claim(claims_index.get("smollm2-perplexity"), scale="tiny", out_root=tmp_path)
    assert rec["error"] is None
    assert rec["verdict"] == "reproduced"
    model_ppl, unigram_ppl = (row["perplexity"] for row in rec["rows"])
    assert 5 < model_ppl < 30 and unigram_ppl > 200
    assert (tmp_path / rec["figures"][0]).is_file()
