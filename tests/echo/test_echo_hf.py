"""A real draft/target pair (two different tiny Qwen2 models, float64): speculative output equals
the target's greedy output for every policy and batch size; the HF-style entry equals
``model.generate(do_sample=False)``; tokenizers are checked."""

import copy

import pytest
import torch

from icml26.echo.decode import SpeculativeDecoder, greedy_reference
from icml26.echo.hf import check_tokenizers, echo_generate
from icml26.echo.policies import AR, AdaptiveChain, DenseDynamic, Echo, StaticTree

PROMPTS = [[5, 6, 7, 8, 9, 10], [40, 41, 42], [100, 101, 102, 103, 104, 105, 106, 107]]
POLICIES = [AR(), StaticTree(depth=4, topk=3, total=10), StaticTree(depth=5, topk=4, total=8, name="SGLang"),
            DenseDynamic(tau=0.3, depth=4, topk=3), DenseDynamic(tau=0.3, depth=4, topk=3, per_request=6),
            AdaptiveChain(depth=4),
            Echo(gate_depths=(2,), taus=(0.3,), depth=4, topk=3, root_topk=6, width_topk=4, total=12),
            Echo(gate_depths=(), taus=(), depth=4, topk=3, total=12)]


def _qwen2(layers, seed, hidden=64):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=300, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=False, use_sliding_window=False)
    m = Qwen2ForCausalLM(cfg).to(torch.float64).eval()
    for p in m.parameters():  # a peaked distribution, so that drafts are often right
        p.data.mul_(3.0)
    return m


@pytest.fixture(scope="module")
def pair():
    target = _qwen2(4, seed=1)
    draft = copy.deepcopy(target)  # a different model that agrees often: the target with noise,
    draft.model.layers = draft.model.layers[:2]  # and half its layers
    draft.config.num_hidden_layers = 2
    g = torch.Generator().manual_seed(3)
    for p in draft.parameters():
        p.data.add_(0.05 * p.data.std() * torch.randn(p.shape, generator=g, dtype=p.dtype))
    ref = [greedy_reference(target, p, 18) for p in PROMPTS]
    return target, draft, ref


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name + str(getattr(p, "per_request", "")))
def test_pair_output_equals_target_greedy(pair, policy):
    target, draft, ref = pair
    for b in (1, 3):
        out = SpeculativeDecoder(target, draft, policy, k_max=14).generate(PROMPTS, 18, batch_size=b)
        assert out.tokens == ref, (policy.name, b)
    if not isinstance(policy, AR):
        assert out.mean_accepted > 1.0  # the draft is right sometimes: trees are really used


def test_echo_generate_equals_hf_generate(pair):
    target, draft, ref = pair
    for p in PROMPTS:
        x = torch.tensor([p])
        hf = target.generate(x, max_new_tokens=18, do_sample=False, eos_token_id=None, pad_token_id=0)
        ours = echo_generate(target, x, assistant_model=draft, max_new_tokens=18, eos_token_id=[])
        assert torch.equal(ours, hf)
    # a left-padded batch, and an EOS that stops one row early (HF pads it with pad_token_id)
    eos = ref[1][4]
    width = max(map(len, PROMPTS[:2]))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in PROMPTS[:2]])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in PROMPTS[:2]])
    hf = target.generate(ids, attention_mask=mask, max_new_tokens=18, do_sample=False, eos_token_id=eos,
                         pad_token_id=0)
    out = echo_generate(target, ids, assistant_model=draft, attention_mask=mask, max_new_tokens=18,
                        eos_token_id=eos, pad_token_id=0, return_dict_in_generate=True)
    assert torch.equal(out["sequences"], hf)
    assert out["stats"].mean_accepted > 1.0
    self_draft = echo_generate(target, torch.tensor([PROMPTS[0]]), exit_layer=2, max_new_tokens=18, eos_token_id=[])
    assert self_draft[0, len(PROMPTS[0]):].tolist() == ref[0]


class _Tok:
    def __init__(self, name, vocab):
        self.name_or_path, self._v = name, vocab

    def get_vocab(self):
        return dict(self._v)


def test_tokenizer_check_names_both(pair):
    target, draft, _ = pair
    a = _Tok("org/target-tok", {"a": 0, "b": 1})
    check_tokenizers(a, _Tok("org/same", {"b": 1, "a": 0}))
    with pytest.raises(ValueError, match=r"'org/draft-tok'.*'org/target-tok'"):
        check_tokenizers(a, _Tok("org/draft-tok", {"a": 1, "b": 0}))
    with pytest.raises(ValueError, match=r"'org/draft-tok'.*'org/target-tok'"):
        echo_generate(target, torch.tensor([PROMPTS[0]]), assistant_model=draft, tokenizer=a,
                      assistant_tokenizer=_Tok("org/draft-tok", {"a": 0}))
    with pytest.raises(NotImplementedError, match="greedy"):
        echo_generate(target, torch.tensor([PROMPTS[0]]), assistant_model=draft, do_sample=True)
    with pytest.raises(ValueError, match="assistant_model"):
        echo_generate(target, torch.tensor([PROMPTS[0]]))
    with pytest.raises(ValueError, match="left padding"):
        echo_generate(target, torch.tensor([[1, 2, 3]]), assistant_model=draft,
                      attention_mask=torch.tensor([[1, 1, 0]]))
