import pytest
import torch

from icml26.core.lm import tiny_llama
from icml26.echo.decode import SpeculativeDecoder, greedy_reference
from icml26.echo.model import TreeLM
from icml26.echo.policies import AR, AdaptiveChain, DenseDynamic, Echo, StaticTree
from icml26.echo.replay import ReplaySet

POLICIES = [AR(), StaticTree(depth=4, topk=3, total=10), StaticTree(depth=3, topk=2, total=4),
            DenseDynamic(tau=0.3, depth=4, topk=3), AdaptiveChain(depth=4),
            Echo(gate_depths=(2,), taus=(0.3,), depth=4, topk=3, root_topk=6, width_topk=4, total=12)]
PROMPTS = [[5, 6, 7, 8, 9, 10], [40, 41, 42], [100, 101, 102, 103, 104, 105, 106, 107]]


@pytest.fixture(scope="module")
def tiny():
    m, _ = tiny_llama(hidden=64, layers=4, heads=4, kv_heads=2, dtype=torch.float64, seed=1)
    ref = [greedy_reference(m, p, 18) for p in PROMPTS]
    return m, ref


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_output_equals_greedy_for_every_policy_and_batch(tiny, policy):
    m, ref = tiny
    for b in (1, 3):
        out = SpeculativeDecoder(m, 2, policy, k_max=14).generate(PROMPTS, 18, batch_size=b)
        assert out.tokens == ref, (policy.name, b)
        assert all(s.verified <= 14 or policy.name.startswith("Static") for s in out.steps)
        assert sum(sum(s.accepted) for s in out.steps) >= sum(map(len, ref)) - len(PROMPTS)


def test_matches_hf_generate_and_eos(tiny):
    m, ref = tiny
    hf = m.generate(torch.tensor([PROMPTS[0]]), max_new_tokens=18, do_sample=False, eos_token_id=None,
                    pad_token_id=0)[0, len(PROMPTS[0]):].tolist()
    assert hf == ref[0]
    eos = ref[0][5]
    out = SpeculativeDecoder(m, 2, StaticTree(depth=4, topk=3, total=10), k_max=14).generate(
        PROMPTS[:1], 18, eos_token_id=eos)
    assert out.tokens[0] == ref[0][: ref[0].index(eos) + 1]


def test_separate_draft_model(tiny):
    m, ref = tiny
    d, _ = tiny_llama(hidden=32, layers=1, heads=2, dtype=torch.float64, seed=5)
    out = SpeculativeDecoder(m, d, Echo(gate_depths=(1,), taus=(0.2,), depth=3, topk=2), k_max=9).generate(
        PROMPTS, 18, batch_size=2)
    assert out.tokens == ref


def test_replay_reproduces_live_accepted_lengths(tiny):
    m, _ = tiny
    for policy in POLICIES[1:]:
        out = SpeculativeDecoder(m, 2, policy, k_max=14).generate(PROMPTS, 24, batch_size=1)
        seqs = [p + t for p, t in zip(PROMPTS, out.tokens, strict=True)]
        pos = [[] for _ in PROMPTS]
        live = []
        for s in out.steps:
            r, p = s.reqs[0], s.positions[0]
            if p + 1 + 4 <= len(seqs[r]) - 1:  # the continuation is known past the tree
                pos[r].append(p)
                live.append(s.accepted[0])
        rs = ReplaySet(TreeLM(m), 2, seqs, pos)
        recs = rs.run(policy, [[i] for i in range(len(rs))], 14)
        assert [r.accepted[0] for r in recs] == live, policy.name


def test_bad_input(tiny):
    m, _ = tiny
    with pytest.raises(ValueError, match="exit_layer"):
        SpeculativeDecoder(m, 4, AR(), k_max=4)
    with pytest.raises(ValueError, match="exit_layer"):
        SpeculativeDecoder(m, 0, AR(), k_max=4)
    other, _ = tiny_llama(hidden=32, layers=1, heads=2, vocab="bytes", dtype=torch.float64)
    other.resize_token_embeddings(300)
    with pytest.raises(ValueError, match=r"vocabulary \(300\).*\(259\)"):
        SpeculativeDecoder(m, other, AR(), k_max=4)
    dec = SpeculativeDecoder(m, 2, AR(), k_max=2)
    with pytest.raises(ValueError, match="k_max must be >= batch_size"):
        dec.generate(PROMPTS, 4, batch_size=3)
    with pytest.raises(NotImplementedError, match="greedy"):
        dec.generate(PROMPTS, 4, temperature=0.7)
    with pytest.raises(ValueError, match="positions"):
        dec.generate([[1] * 500], 10)


def test_replay_tree_memo_equals_fresh_builds(tiny):
    """Batch-independent policies reuse each sample's tree across groups, batch sizes and resamples;
    the records must equal building every group afresh (no memo), and the memo must be used."""
    from icml26.echo.replay import make_groups, replay_accept

    m, ref = tiny
    seqs = [p + t for p, t in zip(PROMPTS, ref, strict=True)]
    pos = [list(range(len(p), len(s) - 5, 2)) for p, s in zip(PROMPTS, seqs, strict=True)]
    rs = ReplaySet(TreeLM(m), 2, seqs, pos)
    fresh = ReplaySet(TreeLM(m), 2, seqs, pos)
    for pol in (StaticTree(depth=4, topk=3, total=10), DenseDynamic(tau=0.3, depth=4, topk=3), AR()):
        assert pol.tree_key(3, 14) is not None
        for b, k_max, seed in ((1, 14, 0), (3, 14, 1), (3, 14, 2), (3, 9, 3), (2, 14, 4)):
            groups = make_groups(len(rs), b, 6, seed)
            recs = rs.run(pol, groups, k_max)
            for g, r in zip(groups, recs, strict=True):
                trees = pol.build(fresh.oracle, g, [fresh.root(s) for s in g], k_max)
                assert r.accepted == [replay_accept(t, fresh.truth(s)) for t, s in zip(trees, g, strict=True)]
                assert r.sizes == [t.size for t in trees]
                assert r.expanded == [list(t.expanded) for t in trees]
    assert 0 < len(rs._trees) <= 6 * len(rs)  # one entry per (policy key, sample): 1 + 4 + 1 keys
    assert Echo().tree_key(3, 14) is None and AdaptiveChain().tree_key(3, 14) is None


def test_replay_memo_cache_round_trip(tiny, tmp_path):
    """The draft oracle's memo saved to .npz and loaded back gives the same records without any
    draft forward; a memo for other sequences is ignored."""
    m, ref = tiny
    seqs = [p + t for p, t in zip(PROMPTS, ref, strict=True)]
    pos = [list(range(len(p), len(s) - 5, 2)) for p, s in zip(PROMPTS, seqs, strict=True)]
    f = tmp_path / "memo.npz"
    a = ReplaySet(TreeLM(m), 2, seqs, pos, memo_file=f)
    a.warm(3, 4)
    a.save_memo(f)
    b = ReplaySet(TreeLM(m), 2, seqs, pos, memo_file=f)
    assert b.loaded == len(a.oracle.memo) and not b._full  # no draft prefix pass
    b.warm(3, 4)
    assert b.oracle.nodes_run == 0
    pol = Echo(gate_depths=(2,), taus=(0.3,), depth=4, topk=3, total=12)
    groups = [[0, 1], [2, 3]]
    assert [r.accepted for r in b.run(pol, groups, 9)] == [r.accepted for r in a.run(pol, groups, 9)]
    other = ReplaySet(TreeLM(m), 2, [s[:-1] for s in seqs], pos, memo_file=f)
    assert other.loaded == 0


def test_warm_of_a_second_width_equals_fresh_computation(tiny):
    """Warming width 2 after width 3 (ancestors memoized but their K/V not in the pass) gives the
    same draft distributions as warming width 2 alone (float64)."""
    m, ref = tiny
    seqs = [p + t for p, t in zip(PROMPTS, ref, strict=True)]
    pos = [list(range(len(p), len(s) - 5, 2)) for p, s in zip(PROMPTS, seqs, strict=True)]
    a = ReplaySet(TreeLM(m), 2, seqs, pos)
    a.warm(3, 4)
    a.warm(2, 4)
    b = ReplaySet(TreeLM(m), 2, seqs, pos)
    b.warm(2, 4)
    for k, (ids, lps) in b.oracle.memo.items():
        assert k in a.oracle.memo
        assert (a.oracle.memo[k][0] == ids).all() and abs(a.oracle.memo[k][1] - lps).max() < 1e-9
