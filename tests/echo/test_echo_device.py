"""Device placement of ECHO's entry points, checked without a GPU.

On a GPU the model and ``input_ids`` sit on ``cuda`` while a tensor made without ``device=`` lands
on the CPU. The same mistake is made visible here by setting the default device to ``meta``
(``with torch.device("meta")``) while the model and ids stay on the CPU: a tensor created without
following them lands on ``meta`` and cannot meet them (nor be read back).
"""

from types import SimpleNamespace

import pytest
import torch

import icml26.echo.hf as hf
from icml26.core.lm import tiny_llama
from icml26.echo.decode import GenerateOutput, greedy_reference
from icml26.echo.hf import echo_generate

ELSEWHERE = torch.device("meta")


@pytest.fixture(scope="module")
def tiny():
    model, _ = tiny_llama(hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, max_len=128, seed=0)
    return model.eval()


def test_greedy_reference_builds_its_input_on_the_model_device(tiny):
    ref = greedy_reference(tiny, [5, 6, 7], 6)
    with torch.device(ELSEWHERE):
        got = greedy_reference(tiny, [5, 6, 7], 6)
    assert got == ref and len(ref) == 6


class _Decoder:
    """Stands in for SpeculativeDecoder: rows of different lengths, so padding is needed."""

    def __init__(self, *args, **kwargs):
        pass

    def generate(self, prompts, max_new_tokens, batch_size=1, eos_token_id=None):
        return GenerateOutput([[1, 2, 3], [4]][: len(prompts)])


def test_echo_generate_pads_on_the_ids_device(monkeypatch):
    monkeypatch.setattr(hf, "SpeculativeDecoder", _Decoder)
    model = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=None, pad_token_id=9))
    ids = torch.tensor([[5, 6, 7], [0, 8, 9]])
    mask = torch.tensor([[1, 1, 1], [0, 1, 1]])
    with torch.device(ELSEWHERE):
        seq = echo_generate(model, ids, exit_layer=1, attention_mask=mask, max_new_tokens=3)
    assert seq.device == ids.device and seq.dtype == ids.dtype
    assert seq.tolist() == [[5, 6, 7, 1, 2, 3], [0, 8, 9, 4, 9, 9]]


def test_echo_generate_end_to_end_matches_greedy(tiny):
    ids = torch.tensor([[5, 6, 7, 8], [0, 0, 11, 12]])
    mask = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]])
    seq = echo_generate(tiny, ids, exit_layer=1, attention_mask=mask, max_new_tokens=5,
                        eos_token_id=[], pad_token_id=0)
    assert seq[0, 4:].tolist() == greedy_reference(tiny, [5, 6, 7, 8], 5)
    assert seq[1, 4:].tolist() == greedy_reference(tiny, [11, 12], 5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_echo_generate_equals_greedy(tiny):
    model = tiny.cuda()
    try:
        ids = torch.tensor([[5, 6, 7, 8]], device="cuda")
        seq = echo_generate(model, ids, exit_layer=1, max_new_tokens=6, eos_token_id=[], pad_token_id=0)
        assert seq.device.type == "cuda"
        assert seq[0, 4:].tolist() == greedy_reference(model, [5, 6, 7, 8], 6)
    finally:
        tiny.cpu()
