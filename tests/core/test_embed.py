"""core.embed: packaged all-MiniLM-L6-v2 without sentence-transformers."""

from __future__ import annotations

import numpy as np
import pytest

from icml26.core.embed import Embedder, _read_st_config, default_embedder, minilm_dir
from icml26.core.errors import UserError


@pytest.fixture(scope="module")
def emb() -> Embedder:
    return default_embedder()


def test_folder_declares_mean_pooling_and_normalize():
    pooling, normalize, max_len = _read_st_config(minilm_dir())
    assert (pooling, normalize, max_len) == ("mean", True, 256)


def test_known_similarities(emb):
    # Reference values from sentence-transformers on the same model (models_data.md §4): 0.76.
    v = emb.encode(["A man is eating food.", "A man is eating a piece of bread.",
                    "The new movie is awful.", "A monkey is playing drums."])
    assert v.shape == (4, 384) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    sim = v @ v.T
    assert sim[0, 1] == pytest.approx(0.76, abs=0.02)
    assert sim[0, 1] > sim[0, 2] and sim[0, 1] > sim[0, 3]


def test_padding_does_not_change_mean_pool(emb):
    short = "Cats sleep."
    long = "A much longer sentence about the history of the Roman Empire and its roads. " * 3
    alone = emb.encode([short])[0]
    batched = emb.encode([short, long])[0]
    np.testing.assert_allclose(alone, batched, atol=1e-5)


def test_mean_pool_matches_hand_computation(emb):
    import torch

    text = "Offline embeddings work."
    enc = emb.tokenizer([text], return_tensors="pt")
    with torch.inference_mode():
        hidden = emb.model(**enc).last_hidden_state[0].double()
    ref = hidden.mean(0)
    ref = (ref / ref.norm()).numpy()
    np.testing.assert_allclose(emb.encode([text])[0], ref, atol=1e-5)
    raw = emb.encode([text], normalize=False)[0]
    np.testing.assert_allclose(raw, hidden.mean(0).numpy(), atol=1e-4)


def test_bad_inputs(tmp_path, emb):
    with pytest.raises(UserError, match="does not exist"):
        Embedder(tmp_path / "nope")
    with pytest.raises(UserError, match="list of texts"):
        emb.encode("one string")
