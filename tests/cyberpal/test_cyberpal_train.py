"""SFT: the loss mask covers exactly the assistant tokens; the masked loss matches a float64
reference; training lowers the loss; JSONL chats render and bad lines are named."""

import json

import pytest
import torch

from icml26.core.errors import UserError
from icml26.core.lm import byte_tokenizer, tiny_llama
from icml26.cyberpal.enrich import read_jsonl, write_jsonl
from icml26.cyberpal.train import SFTConfig, _loss, encode_chat, render_chat, sft

CHAT = [{"role": "system", "content": "Sys."}, {"role": "user", "content": "Which CWE?"},
        {"role": "assistant", "content": "Category: CWE-74\nAnswer: CWE-79: XSS"}]


def _smollm_tok():
    try:
        from icml26.core.lm import load_tokenizer

        return load_tokenizer(None)
    except Exception:  # noqa: BLE001 - the packaged model may be absent in a minimal setup
        return None


@pytest.mark.parametrize("which", ["bytes", "smollm2"])
def test_mask_is_exactly_the_assistant_turn(which):
    tok = byte_tokenizer() if which == "bytes" else _smollm_tok()
    if tok is None:
        pytest.skip("SmolLM2 tokenizer not available")
    ids, mask = encode_chat(tok, CHAT)
    trained = tok.decode([i for i, m in zip(ids, mask, strict=False) if m])
    assert trained.startswith(CHAT[-1]["content"])
    end = trained[len(CHAT[-1]["content"]):]
    assert end in ("\n<|eos|>", "<|im_end|>\n", "<|im_end|>")  # the end-of-turn marker only
    prompt = render_chat(tok, CHAT[:-1], add_generation_prompt=True)
    assert ids[: len(prompt)] == prompt and not any(mask[: len(prompt)])
    assert all(mask[len(prompt):])


def test_masked_loss_matches_float64_reference():
    model, tok = tiny_llama(hidden=32, layers=1, heads=2, vocab="bytes", seed=3)
    model = model.double()
    ids, mask = encode_chat(tok, CHAT)
    x = torch.tensor([ids])
    m = torch.tensor([mask])
    got = _loss(model, x, torch.ones_like(x), m)
    logp = torch.log_softmax(model(input_ids=x).logits[0].double(), -1)
    ref = -torch.stack([logp[t - 1, ids[t]] for t in range(1, len(ids)) if mask[t]]).mean()
    assert got.item() == pytest.approx(float(ref), rel=1e-9)


def test_sft_lowers_loss_and_saves(tmp_path):
    model, tok = tiny_llama(hidden=32, layers=1, heads=2, vocab="bytes", seed=0)
    recs = [{"messages": CHAT}] * 8
    model, st = sft(model, tok, recs, SFTConfig(epochs=6, lr=1e-2, batch_size=4, autocast=False),
                    out_dir=tmp_path / "m")
    assert st.steps == 12 and st.losses[-1] < 0.6 * st.losses[0]
    assert st.tokens_trained == 6 * 8 * sum(encode_chat(tok, CHAT)[1][1:])
    info = json.loads((tmp_path / "m" / "sft.json").read_text())
    assert info["records"] == 8 and (tmp_path / "m" / "config.json").is_file()
    with pytest.raises(ValueError, match="lr must be"):
        SFTConfig(lr=0)


def test_lora_sft_runs_and_merges():
    model, tok = tiny_llama(hidden=32, layers=1, heads=2, vocab="bytes", seed=0)
    model, st = sft(model, tok, [{"messages": CHAT}] * 4,
                    SFTConfig(epochs=3, lr=5e-2, batch_size=4, lora=True, lora_r=4, autocast=False))
    assert type(model).__name__ == "LlamaForCausalLM" and st.losses[-1] < st.losses[0]


def test_jsonl_round_trip_and_bad_lines(tmp_path):
    p = tmp_path / "d.jsonl"
    write_jsonl(p, [{"messages": CHAT, "meta": {"id": "CVE-2020-1"}}])
    assert read_jsonl(p)[0]["meta"]["id"] == "CVE-2020-1"
    p.write_text(p.read_text() + '{"messages": [{"role": "user", "content": "x"}]}\n')
    with pytest.raises(UserError, match=r"d.jsonl:2: not a chat record"):
        read_jsonl(p)
    p.write_text("{oops\n")
    with pytest.raises(UserError, match=r"d.jsonl: row 1: not JSON.*\(line 1\)"):
        read_jsonl(p)


def test_group_by_length_covers_each_chat_once_per_epoch_and_cuts_padding():
    import numpy as np

    from icml26.cyberpal.train import _batches

    rng = np.random.default_rng(0)
    lengths = [int(x) for x in rng.integers(60, 160, size=613)]
    plain = _batches(613, 4, 2, 7)
    grouped = _batches(613, 4, 2, 7, lengths, window=50)
    for plan in (plain, grouped):
        flat = [i for b in plan for i in b]
        assert sorted(flat) == sorted(list(range(613)) * 2)
        assert sorted(flat[:613]) == list(range(613))  # epoch 1 = every chat once
        assert all(1 <= len(b) <= 4 for b in plan)

    def padded(plan):
        return sum(max(lengths[i] for i in b) * len(b) for b in plan)

    real = 2 * sum(lengths)
    assert padded(grouped) / real - 1 < 0.03 < padded(plain) / real - 1
    assert grouped == _batches(613, 4, 2, 7, lengths, window=50)  # seeded
    assert [len(b) for b in grouped].count(4) >= 150  # not all singletons
