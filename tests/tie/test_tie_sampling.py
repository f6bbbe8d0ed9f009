import torch

from icml26.core.lm import tiny_llama
from icml26.tie.sampling import SampleConfig, _chat_ids, sample_lengths


def _greedy(model, ids, n):
    x = torch.tensor([ids])
    out = []
    with torch.no_grad():
        for _ in range(n):
            nxt = int(model(input_ids=x).logits[0, -1].argmax())
            out.append(nxt)
            x = torch.cat([x, torch.tensor([[nxt]])], 1)
    return out


def test_refilling_batch_matches_unbatched_greedy():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: threading only adds overhead
    try:
        _check()
    finally:
        torch.set_num_threads(threads)


def _check():
    """Near-zero temperature = greedy: the refilling, left-padded, merged batch must stop every row
    exactly where an unbatched greedy decode of that prompt first emits the stop token."""
    torch.manual_seed(0)
    model, tok = tiny_llama(hidden=64, layers=2, heads=4, kv_heads=2, seed=3)
    model.generation_config.eos_token_id = None
    prompts = ["a", "hello there", "the quick brown fox jumps", "xyz 123", "q"]
    cap = 12
    conts = [_greedy(model, _chat_ids(tok, p), cap) for p in prompts]
    # pick a stop token that greedy emits early for some prompts and never for others
    counts = {}
    for c in conts:
        for t in set(c[:6]):
            counts[t] = counts.get(t, 0) + 1
    stop = max(counts, key=lambda t: (0 < counts[t] < len(prompts), counts[t]))
    tok.eos_token = tok.convert_ids_to_tokens(stop)
    expected = [c.index(stop) + 1 if stop in c else cap for c in conts]
    assert len(set(expected)) > 1
    res = sample_lengths(model, tok, prompts, SampleConfig(n_samples=2, cap=cap, temperature=1e-6, batch_size=3,
                                                          refill_at=1))
    for p, e in zip(prompts, expected, strict=True):
        assert res[p]["lengths"] == [e, e], (p, res[p], e)
        assert res[p]["censored"] == [e == cap and stop not in conts[prompts.index(p)][:cap]] * 2
