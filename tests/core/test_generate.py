"""core.generate against HF in float64 on a tiny Llama: greedy tokens, log-probs, independence
of batch company, stop strings, prefix reuse and the bad-input errors."""

import pytest
import torch

from icml26.core.errors import UserError
from icml26.core.generate import PromptCache, generate, sample_rows
from icml26.core.lm import tiny_llama

PROMPTS = ["a", "hello there", "the quick brown fox jumps", "xyz 123", "q",
           "another prompt, a longer one!"]
EOS = set(range(0, 259, 9))  # ~11% of the byte vocabulary: varied lengths, some hit the cap


@pytest.fixture(scope="module")
def tiny():
    """A float64 tiny Llama with weights big enough that its greedy output varies."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model, tok = tiny_llama(hidden=64, layers=2, heads=4, kv_heads=2, seed=3)
    model = model.double()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 2:
                p.normal_(0, 0.15, generator=g)
    model.generation_config.eos_token_id = None
    yield model, tok
    torch.set_num_threads(threads)


def _ref_logprobs(model, prompt_ids, gen):
    full = torch.tensor([prompt_ids + gen])
    with torch.no_grad():
        lp = torch.log_softmax(model(full).logits[0].double(), -1)
    return [float(lp[len(prompt_ids) - 1 + k, t]) for k, t in enumerate(gen)]


def test_greedy_equals_hf_generate_through_refills(tiny):
    model, tok = tiny
    out = generate(model, tok, PROMPTS, max_new_tokens=10, batch_size=3, eos_token_ids=())
    assert len({tuple(g.token_ids) for g in out}) == len(PROMPTS)
    assert [g.computed for g in out] == [g.prompt_tokens for g in out]  # no common prefix
    for p, g in zip(PROMPTS, out, strict=True):
        ids = tok(p, return_tensors="pt")["input_ids"]
        ref = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10,
                             do_sample=False, pad_token_id=0)[0, ids.shape[1]:].tolist()
        assert g.token_ids == ref, p
        assert g.finish_reason == "length" and g.prompt_tokens == ids.shape[1]


@pytest.mark.parametrize("prefix", [None, "auto", "SYSTEM: be nice. "])
def test_sampled_logprobs_equal_a_full_forward(tiny, prefix):
    """Through refills (batch 4 < 6 prompts), EOS and length stops, and prefix reuse."""
    model, tok = tiny
    system = "SYSTEM: be nice. "
    prompts = [system + p for p in PROMPTS] if prefix == "auto" else PROMPTS
    out = generate(model, tok, prompts, max_new_tokens=14, batch_size=4, temperature=1.0,
                   logprobs=True, eos_token_ids=EOS, seed=5, prefix=prefix)
    assert {g.finish_reason for g in out} == {"eos", "length"}
    for p, g in zip(prompts, out, strict=True):
        ids = tok((system if prefix == system else "") + p)["input_ids"]
        assert g.prompt_tokens == len(ids)
        if prefix is not None:
            assert g.computed == len(ids) - len(tok(system)["input_ids"])
        assert (g.finish_reason == "eos") == (g.token_ids[-1] in EOS)
        assert g.logprobs == pytest.approx(_ref_logprobs(model, ids, g.token_ids), abs=1e-9)


def _tiny_gemma3():
    """A tiny float64 Gemma3 with a 6-token sliding window on the first of its two layers."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from icml26.core.lm import byte_tokenizer

    tok = byte_tokenizer()
    cfg = Gemma3TextConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=6,
        max_position_embeddings=256, layer_types=["sliding_attention", "full_attention"],
        pad_token_id=256, bos_token_id=257, eos_token_id=258)
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(cfg).double().eval()
    return model, tok


def test_gemma3_sliding_window_logprobs_equal_a_full_forward():
    """A tiny float64 Gemma3 with a 6-token sliding window on one of its two layers: prompts
    longer than the window, log-probs against HF's own forward (which applies the window)."""
    model, tok = _tiny_gemma3()
    out = generate(model, tok, PROMPTS, max_new_tokens=12, batch_size=2, eos_token_ids=(),
                   temperature=1.0, logprobs=True)
    for p, g in zip(PROMPTS, out, strict=True):
        ids = tok(p)["input_ids"]
        assert g.logprobs == pytest.approx(_ref_logprobs(model, ids, g.token_ids), abs=1e-9)


def test_a_rows_sample_does_not_depend_on_its_neighbours(tiny):
    model, tok = tiny
    kw = dict(max_new_tokens=12, temperature=0.9, top_p=0.95, eos_token_ids=())
    base = generate(model, tok, PROMPTS, batch_size=4, seed=7, **kw)
    other = ["zz", PROMPTS[1], "completely different", PROMPTS[3], "w", "x"]
    for bs in (1, 2, 6):
        got = generate(model, tok, other, batch_size=bs, seed=7, **kw)
        assert got[1].token_ids == base[1].token_ids and got[3].token_ids == base[3].token_ids
    assert generate(model, tok, PROMPTS[1:2], seed=8, **kw)[0].token_ids == base[1].token_ids
    assert generate(model, tok, PROMPTS[1:2], seed=[9], **kw)[0].token_ids != base[1].token_ids


def test_stop_strings_cut_exactly(tiny):
    model, tok = tiny
    free = generate(model, tok, PROMPTS, max_new_tokens=16, eos_token_ids=())
    text = free[2].text
    stop = text[5:7]  # a stop string that occurs in the free text
    cut = text.index(stop)
    got = generate(model, tok, PROMPTS, max_new_tokens=16, eos_token_ids=(), stop=[stop, "\x00#"])
    g = got[2]
    assert g.finish_reason == "stop" and g.text == text[:cut] and not g.text.endswith(stop)
    assert stop in tok.decode(g.token_ids) and stop not in tok.decode(g.token_ids[:-1])
    for f, h in zip(free, got, strict=True):  # rows without the stop string are unchanged
        if stop not in f.text:
            assert h.token_ids == f.token_ids and h.finish_reason == "length"
    fence = generate(model, tok, PROMPTS[2:3], max_new_tokens=16, eos_token_ids=(),
                     until=lambda t: stop in t)[0]
    assert fence.finish_reason == "stop" and fence.text.endswith(stop)


def test_prompt_cache_reuses_earlier_prompts(tiny):
    model, tok = tiny
    pc = PromptCache()
    first = generate(model, tok, PROMPTS[:3], max_new_tokens=6, prefix=pc, eos_token_ids=())
    longer = [p + " and more" for p in PROMPTS[:3]]
    again = generate(model, tok, longer, max_new_tokens=6, prefix=pc, eos_token_ids=(),
                     logprobs=True)
    assert [g.computed for g in first] == [len(tok(p)["input_ids"]) for p in PROMPTS[:3]]
    assert [g.computed for g in again] == [len(" and more")] * 3
    plain = generate(model, tok, longer, max_new_tokens=6, eos_token_ids=())
    assert [g.token_ids for g in again] == [g.token_ids for g in plain]


def test_chat_prompts_and_hooks(tiny):
    model, tok = tiny
    tok.chat_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}>"
    chat = [{"role": "user", "content": "hi"}]
    seen, rows = [], []
    a = generate(model, tok, [chat], max_new_tokens=3, eos_token_ids=(),
                 on_token=lambda r, lg, t: seen.append((r, t.tolist())),
                 before_forward=rows.append)[0]
    b = generate(model, tok, ["<user>hi>"], max_new_tokens=3, eos_token_ids=())[0]
    assert a.token_ids == b.token_ids and [t for _, (t,) in seen] == a.token_ids
    assert rows == [[0]] * 3
    done = []

    class Progress:  # a claim's progress handle: task(description, total) -> advance(n)
        def task(self, description, total):
            return lambda k=1: done.append((description, total, k))

    forced = generate(model, tok, PROMPTS[:2], max_new_tokens=3, eos_token_ids=(),
                      sampler=lambda lg, r: torch.full((lg.shape[0],), 65), progress=Progress())
    assert [g.text for g in forced] == ["AAA", "AAA"] and done == [("generate", 2, 1)] * 2
    assert generate(model, tok, ["a"], max_new_tokens=2, progress=True)[0].token_ids


def test_top_p_keeps_the_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).expand(4, 4)
    u = torch.tensor([0.1, 0.6, 0.9, 0.99])
    assert sample_rows(logits, u, 1.0, 0.75).tolist() == [0, 0, 1, 1]  # the nucleus is {0, 1}
    assert sample_rows(logits, u, 1.0, 1.0).tolist() == [0, 1, 2, 3]
    assert sample_rows(logits, u, 0.0, 1.0).tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize(("kw", "match"), [
    (dict(max_new_tokens=0), "max_new_tokens must be an integer >= 1; got 0"),
    (dict(max_new_tokens=4, top_p=0.0), r"top_p must be in \(0, 1\]; got 0.0"),
    (dict(max_new_tokens=4, top_p=1.5), r"top_p must be in \(0, 1\]; got 1.5"),
    (dict(max_new_tokens=4, temperature=-0.1), "temperature must be >= 0; got -0.1"),
    (dict(max_new_tokens=4, stop=[""]), "stop strings"),
])
def test_bad_input(tiny, kw, match):
    model, tok = tiny
    with pytest.raises(UserError, match=match):
        generate(model, tok, ["a"], **kw)


def test_prompt_longer_than_the_context(tiny):
    model, tok = tiny
    with pytest.raises(UserError, match="prompt 1 has 600 tokens; the model's context is 512"):
        generate(model, tok, ["a", "b" * 600], max_new_tokens=2)
    with pytest.raises(UserError, match="prompt 0 is empty"):
        generate(model, tok, [[]], max_new_tokens=2)


@pytest.mark.parametrize("prefix", [None, "auto"])
def test_fed_requests_join_the_running_batch(tiny, prefix):
    """Continuous batching: requests fed while rows decode get the same tokens and log-probs as
    when given up front (float64: exact), keep their own seeds and limits, and can need a
    longer cache than the first prompts (the cache grows)."""
    model, tok = tiny
    system = "SYSTEM: be nice. "
    first = [system + p for p in PROMPTS[:2]]
    later = [(system + p, 6 + k, 40 + k) for k, p in enumerate(PROMPTS[2:])]
    later.append((system + "a much longer prompt than any of the first two, " * 3, 20, 99))
    kw = dict(temperature=1.0, logprobs=True, eos_token_ids=EOS, prefix=prefix)
    ref = generate(model, tok, first + [p for p, _, _ in later], batch_size=3,
                   max_new_tokens=[5, 5] + [m for _, m, _ in later],
                   seed=[1, 2] + [s for _, _, s in later], **kw)
    calls, done, pending = [], [], list(later)

    def feed(k):
        calls.append(k)
        out, pending[:] = pending[:1], pending[1:]  # one request per call: arrivals spread out
        return out

    out = generate(model, tok, first, batch_size=3, max_new_tokens=5, seed=[1, 2], feed=feed,
                   on_finish=lambda i, g: done.append(i), **kw)
    assert len(out) == len(ref) == 2 + len(later) and sorted(done) == list(range(len(out)))
    assert done != sorted(done)  # fed requests finished while others ran
    for g, r, (p, m, _) in zip(out[2:], ref[2:], later, strict=True):
        assert g.token_ids == r.token_ids and len(g.token_ids) <= m
        ids = tok(p)["input_ids"]
        assert g.logprobs == pytest.approx(_ref_logprobs(model, ids, g.token_ids), abs=1e-9)
    assert [g.token_ids for g in out[:2]] == [g.token_ids for g in ref[:2]]
    if prefix == "auto":  # fed prompts reuse the prefix found in the first ones
        assert all(g.computed < g.prompt_tokens for g in out[2:])
    assert all(1 <= k <= 3 for k in calls) and calls[-1] >= 1  # asked only with free slots
    # nothing up front: the call starts from the feed alone, and a bad request names itself
    once = [("xyz", 3, 0)]
    got = generate(model, tok, [], max_new_tokens=3, feed=lambda k: once[:k] and [once.pop()],
                   eos_token_ids=())
    assert len(got) == 1 and len(got[0].token_ids) == 3
    with pytest.raises(UserError, match="expected \\(prompt, max_new_tokens, seed\\)"):
        generate(model, tok, ["a"], max_new_tokens=3, feed=lambda k: ["oops"])
    with pytest.raises(UserError, match="max_new_tokens must be"):
        generate(model, tok, ["a"], max_new_tokens=3, feed=lambda k: [("b", 0, 0)])


# ---- ragged decode attention ----------------------------------------------------------------

def test_ragged_plan_buckets_by_power_of_two():
    from icml26.core.generate import ragged_plan

    need = torch.tensor([3, 40, 129, 130, 300, 1000, 17, 600])
    plan = ragged_plan(need, 1000, min_window=64, max_cost=1.0)
    rows = sorted(int(r) for idx, _ in plan for r in idx)
    assert rows == list(range(len(need)))  # every row in exactly one bucket
    for idx, w in plan:
        assert all(int(need[r]) <= w for r in idx)  # a bucket reads every column its rows need
        assert w == 1000 or w & (w - 1) == 0  # powers of two, the window for the longest
    assert {w for _, w in plan} == {64, 256, 512, 1000}
    # brute force: the bucket is the smallest admissible level for each row
    for idx, w in plan:
        for r in idx:
            n = max(int(need[r]), 64)
            assert w == min(1000, 1 << (n - 1).bit_length())
    # not worth it: one bucket, a short window, or too little saved
    assert ragged_plan(torch.tensor([900, 1000]), 1000, min_window=64) is None
    assert ragged_plan(torch.tensor([3, 100]), 100, min_window=64) is None
    assert ragged_plan(torch.tensor([3, 1000]), 1000, min_window=64, max_cost=0.5) is None
    assert ragged_plan(torch.tensor([3, 1000]), 1000, min_window=64, max_cost=0.6) is not None
    with pytest.raises(ValueError, match="needs 1001"):
        ragged_plan(torch.tensor([3, 1001]), 1000, min_window=64)


def _spy_ragged(monkeypatch):
    """Small buckets for tiny prompts; count the decode steps that ran per bucket."""
    from transformers import AttentionInterface

    import icml26.core.generate as G

    monkeypatch.setattr(G, "_RAGGED_MIN_WINDOW", 4)
    seen = []
    real = G._ragged_attention

    def spy(module, query, *args, **kw):
        plan = G._RAGGED_PLAN.get()
        if plan is not None and query.shape[2] == 1:
            seen.append(len(plan))
        return real(module, query, *args, **kw)

    AttentionInterface.register(G.RAGGED_ATTENTION, spy)
    yield seen
    AttentionInterface.register(G.RAGGED_ATTENTION, real)


@pytest.fixture
def ragged_spy(monkeypatch):
    yield from _spy_ragged(monkeypatch)


def test_ragged_decode_equals_a_full_forward_and_the_single_window(tiny, ragged_spy):
    """Rows of very different lengths (one runs long), float64: the per-bucket attention gives
    the full forward's log-probs and exactly the single-window run's tokens."""
    model, tok = tiny
    prompts = PROMPTS + ["x" * 40]
    lims = [3, 60, 5, 45, 7, 9, 30]
    kw = dict(max_new_tokens=lims, batch_size=4, temperature=1.0, logprobs=True,
              eos_token_ids=(), seed=2)
    a = generate(model, tok, prompts, ragged=False, **kw)
    assert not ragged_spy
    b = generate(model, tok, prompts, **kw)
    assert ragged_spy and max(ragged_spy) >= 2  # the bucketed path ran, with several buckets
    assert model.config._attn_implementation == "sdpa"  # switched back
    for p, x, y in zip(prompts, a, b, strict=True):
        assert x.token_ids == y.token_ids
        assert y.logprobs == pytest.approx(x.logprobs, abs=1e-12)
        assert y.logprobs == pytest.approx(_ref_logprobs(model, tok(p)["input_ids"], y.token_ids),
                                           abs=1e-9)


def test_ragged_decode_with_a_sliding_window(ragged_spy):
    model, tok = _tiny_gemma3()
    out = generate(model, tok, PROMPTS, max_new_tokens=[40, 3, 4, 5, 30, 6], batch_size=6,
                   eos_token_ids=(), temperature=1.0, logprobs=True)
    assert ragged_spy and max(ragged_spy) >= 2
    for p, g in zip(PROMPTS, out, strict=True):
        ids = tok(p)["input_ids"]
        assert g.logprobs == pytest.approx(_ref_logprobs(model, ids, g.token_ids), abs=1e-9)


def test_the_model_is_switched_back_when_generation_fails(tiny):
    model, tok = tiny

    def boom(i, g):
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        generate(model, tok, PROMPTS, max_new_tokens=3, eos_token_ids=(), on_finish=boom)
    assert model.config._attn_implementation == "sdpa"
