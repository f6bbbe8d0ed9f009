import pytest
import torch

from icml26.core.lm import tiny_llama
from icml26.tie.sampling import SampleConfig, _chat_ids, draw_cdf, sample_lengths


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
        _check(engine="concat")
    finally:
        torch.set_num_threads(threads)


def _check(engine):
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
                                                          refill_at=1, engine=engine))
    for p, e in zip(prompts, expected, strict=True):
        assert res[p]["lengths"] == [e, e], (p, res[p], e)
        assert res[p]["censored"] == [e == cap and stop not in conts[prompts.index(p)][:cap]] * 2


def _fast_vs_hf(dtype, atol, attention):
    """The static (preallocated-KV) engine: every sampled token's logits equal an HF forward over
    the full prompt + sampled prefix, through refills of freed slots, left shifts of the column
    window (margin 2 forces many), the drain repack and duplicate prompts (one prefill per group)."""
    from icml26.tie.fastdecode import decode_static

    model, tok = tiny_llama(hidden=64, layers=2, heads=4, kv_heads=2, seed=5, dtype=dtype)
    prompts = ["a", "hello there", "the quick brown fox jumps over", "xyz 123", "q"]
    jobs = [(p, _chat_ids(tok, p)) for p in prompts for _ in range(3)]
    gen = torch.Generator().manual_seed(0)
    eos = set(range(0, 259, 9))  # ~11% of the byte vocabulary: varied lengths, some censored
    steps: dict[int, list] = {}
    records = []

    def sample(logits):
        return torch.multinomial(torch.softmax(logits.float(), -1), 1, generator=gen).squeeze(1)

    def on_step(idx, logits, toks):
        for j, lg, t in zip(idx, logits, toks, strict=True):
            steps.setdefault(j, []).append((lg.double().clone(), int(t)))

    decode_static(model, tok.pad_token_id or 0, jobs, batch_size=4, cap=14, eos=eos, sample=sample,
                  record=lambda k, n, c: records.append((k, n, c)), refill_at=3, margin=2, attention=attention,
                  on_step=on_step)
    assert len(records) == len(jobs) and len(steps) == len(jobs)
    lengths = sorted(n for _, n, _ in records)
    assert lengths[0] < 14 and lengths[-1] == 14 and len(set(lengths)) > 3
    worst = 0.0
    with torch.no_grad():
        for j, (_, ids) in enumerate(jobs):
            seq = [t for _, t in steps[j]]
            assert (seq[-1] in eos) != (len(seq) == 14 and seq[-1] not in eos)
            assert all(t not in eos for t in seq[:-1])
            ref = model(input_ids=torch.tensor([ids + seq[:-1]])).logits[0, len(ids) - 1:].double()
            got = torch.stack([lg for lg, _ in steps[j]])
            worst = max(worst, float((got - ref).abs().max()))
    assert worst < atol, worst
    assert sorted((k, n) for k, n, _ in records) == sorted((p, len(steps[j])) for j, (p, _) in enumerate(jobs))


def test_static_engine_logits_match_hf_forward():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for attention in ("batched", "rows", "auto"):
            _fast_vs_hf(torch.float32, 1e-4, attention)
        _fast_vs_hf(torch.float64, 1e-9, "auto")
    finally:
        torch.set_num_threads(threads)


def test_refilling_batch_static_engine_matches_unbatched_greedy():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _check(engine="static")
    finally:
        torch.set_num_threads(threads)


def test_draw_cdf_is_an_exact_categorical_draw():
    """Frequencies of 200k inverse-CDF draws match softmax(logits / T) within 5 binomial s.e.,
    for two temperatures; zero-probability tokens are never drawn."""
    logits = torch.tensor([[0.0, 1.0, -2.0, 0.5, float("-inf"), 3.0]] * 4)
    gen = torch.Generator().manual_seed(1)
    for T in (1.0, 0.5):
        p = torch.softmax(logits[0].double() / T, -1)
        draws = torch.cat([draw_cdf(logits, T, gen) for _ in range(50_000)])
        freq = torch.bincount(draws, minlength=6).double() / draws.numel()
        se = (p * (1 - p) / draws.numel()).sqrt()
        assert freq[4] == 0
        assert bool(((freq - p).abs() <= 5 * se + 1e-12).all()), (freq, p)


def test_sample_config_rejects_bad_engine_and_draw():
    with pytest.raises(ValueError, match="engine"):
        SampleConfig(engine="fast")
    with pytest.raises(ValueError, match="draw"):
        SampleConfig(draw="gumbel")
