import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.core.errors import UserError
from icml26.sim import (
    Engine,
    EngineConfig,
    FCFSQueue,
    GemmEfficiency,
    HardwareSpec,
    Interconnect,
    ModelSpec,
    ReplicaCost,
    Request,
    simulate,
)

H100 = HardwareSpec.h100()


def llama2_70b():
    return ModelSpec("Llama-2-70B", 80, 8192, 64, 8, 28672, 32000)


def mha_30b():  # LLaMA-30B shape: multi-head attention (52 KV heads)
    return ModelSpec("MHA-30B", 60, 6656, 52, 52, 17920, 32000)


# ---- an independent scalar restatement of the documented equations (docs/sim.md)
def _eff(m, n, k, g):
    w = (m + 64) * n
    return g.e_max * m / (m + g.m_half) * w / (w + g.mn_half) * k / (k + g.k_half)


def _stage_by_hand(model, hw, tp, pp, tokens, attn_pairs, kv_read, g, net=Interconnect(), attn_eff=0.5):
    """One stage of a single-sequence micro-batch (1 sequence sampled)."""
    d, h, hd, f, v, b = model.hidden, model.n_heads, model.hd, model.ffn, model.vocab, model.dtype_bytes
    kvh = math.ceil(model.n_kv_heads / tp)
    ls = model.n_layers / pp
    gemms = [(h * hd / tp + 2 * kvh * hd, d), (d, h * hd / tp), (2 * f / tp, d), (d, f / tp)]
    comp = ls * sum(2 * tokens * n * k / (hw.peak_flops * _eff(tokens, n, k, g)) for n, k in gemms)
    comp += 2 * 1 * (v / tp) * d / (hw.peak_flops * _eff(1, v / tp, d, g)) / pp
    comp += 4 * ls * (h / tp) * hd * attn_pairs / (hw.peak_flops * attn_eff)
    weights = (ls * sum(n * k for n, k in gemms) + v * d / tp / pp) * b
    kv_token = 2 * ls * kvh * hd * b
    mem = (weights + kv_token * kv_read) / (hw.mem_bw * hw.mbu)
    ar = 0.0 if tp == 1 else net.ar_alpha_s + 2 * (tp - 1) * net.ar_step_s + 2 * (tp - 1) / tp * d * b * tokens / net.ar_busbw
    return max(comp, mem) + 2 * ls * ar


def _round_by_hand(model, hw, tp, pp, tokens, ctx, g):
    """A lone sequence's round: all pp stages in turn, pp - 1 sends, one overhead."""
    net = Interconnect()
    pairs = tokens * ctx + tokens * (tokens + 1) / 2
    stage = _stage_by_hand(model, hw, tp, pp, tokens, pairs, ctx + tokens, g)
    p2p = (pp - 1) * (net.p2p_alpha_s + model.hidden * model.dtype_bytes * tokens / net.p2p_bw)
    return pp * stage + p2p + hw.overhead_s


LAYOUTS = [(llama2_70b, 2, 1), (llama2_70b, 4, 1), (llama2_70b, 8, 1), (llama2_70b, 2, 2), (llama2_70b, 4, 2),
           (llama2_70b, 2, 4), (mha_30b, 1, 1), (mha_30b, 2, 1), (mha_30b, 4, 1), (mha_30b, 1, 4), (mha_30b, 4, 2)]


@pytest.mark.parametrize("skip", [True, False])
@pytest.mark.parametrize("make,tp,pp", LAYOUTS, ids=[f"{m.__name__}-tp{t}pp{p}" for m, t, p in LAYOUTS])
def test_single_request_timeline_matches_closed_form(make, tp, pp, skip):
    model = make()
    cost = ReplicaCost(model, H100, tp, pp)
    g = GemmEfficiency.for_gpu("H100-SXM")
    prompt, out = 700, 40
    eng = Engine(EngineConfig(max_num_batched_tokens=8192, skip_ahead=skip), cost, FCFSQueue())
    (rec,) = simulate([Request("r", 2.0, prompt, out)], eng)
    ttft = _round_by_hand(model, H100, tp, pp, prompt, 0, g)
    assert rec.ttft_s == pytest.approx(ttft, rel=1e-9)
    decodes = sum(_round_by_hand(model, H100, tp, pp, 1, prompt + j, g) for j in range(out - 1))
    assert rec.e2e_s == pytest.approx(ttft + decodes, rel=1e-9)


def test_tpot_figures_are_in_a_plausible_range():
    # a lone decode on Llama-2-70B: weight streaming + 160 all-reduces + the fixed overhead
    t8 = ReplicaCost(llama2_70b(), H100, 8).forward_time([1], [1000])
    t2 = ReplicaCost(llama2_70b(), H100, 2).forward_time([1], [1000])
    assert 0.010 < t8 < 0.025 and 0.025 < t2 < 0.045
    assert t8 < t2  # TP still cuts single-request latency here


@settings(max_examples=60, deadline=None)
@given(prompt=st.integers(1, 6000), out=st.integers(1, 300), lay=st.sampled_from(
    [(llama2_70b, 2), (llama2_70b, 4), (mha_30b, 1), (mha_30b, 2), (mha_30b, 4)]), pp=st.sampled_from([2, 4]))
def test_pipeline_parallelism_never_lowers_single_request_latency(prompt, out, lay, pp):
    make, tp = lay
    if tp * pp > 8:
        pp = 8 // tp
    e2e = {}
    for p in (1, pp):
        eng = Engine(EngineConfig(max_num_batched_tokens=8192), ReplicaCost(make(), H100, tp, p), FCFSQueue())
        (r,) = simulate([Request(0, 0.0, prompt, out)], eng)
        e2e[p] = (r.ttft_s, r.e2e_s)
    assert e2e[pp][0] >= e2e[1][0] and e2e[pp][1] >= e2e[1][1]


@settings(max_examples=200, deadline=None)
@given(nbytes=st.floats(0, 1e9), tp=st.integers(1, 63))
def test_allreduce_cost_monotone_in_tp(nbytes, tp):
    net = Interconnect()
    assert net.allreduce_s(nbytes, tp + 1) >= net.allreduce_s(nbytes, tp)
    assert net.allreduce_s(nbytes, 1) == 0.0


def test_allreduce_alpha_is_realistic_at_tp8():
    net = Interconnect()
    assert 20e-6 <= net.allreduce_alpha_s(8) <= 50e-6
    assert net.allreduce_alpha_s(2) < net.allreduce_alpha_s(4) < net.allreduce_alpha_s(8)
    # bandwidth term: a 64 MiB all-reduce over 8 GPUs moves 2*7/8 of it at the bus bandwidth
    assert net.allreduce_s(2**26, 8) == pytest.approx(net.allreduce_alpha_s(8) + 1.75 * 2**26 / 360e9)


@pytest.mark.parametrize("tp,pp", [(2, 1), (4, 1), (8, 1), (2, 2), (2, 4), (4, 2)])
def test_decode_run_time_is_the_sum_of_rounds(tp, pp):
    cost = ReplicaCost(llama2_70b(), H100, tp, pp)
    for ctx in (np.array([10, 500, 3000, 77]), np.array([5]), np.arange(1, 300) * 7):
        for k in (1, 2, 17, 400):
            ref = sum(cost.iteration_time([], ctx + j) for j in range(k))
            assert cost.decode_run_time(ctx, k) == pytest.approx(ref, rel=1e-10)


def test_engine_limits_scale_with_kv_capacity_and_can_be_overridden():
    kv = {tp: ReplicaCost(llama2_70b(), H100, tp).kv_capacity_tokens() for tp in (2, 4, 8)}
    assert kv[2] < kv[4] < kv[8]
    cfgs = {tp: ReplicaCost(llama2_70b(), H100, tp).engine_config() for tp in (2, 4, 8)}
    assert cfgs[2].max_num_seqs < cfgs[4].max_num_seqs < cfgs[8].max_num_seqs <= 1024
    assert all(c.kv_tokens == kv[tp] and c.max_num_batched_tokens >= c.max_num_seqs for tp, c in cfgs.items())
    assert cfgs[4].max_num_seqs == kv[4] // 2048
    over = ReplicaCost(llama2_70b(), H100, 4).engine_config(max_num_seqs=7, max_num_batched_tokens=512, oversize="drop")
    assert (over.max_num_seqs, over.max_num_batched_tokens, over.oversize) == (7, 512, "drop")
    small = EngineConfig.scaled(5000)
    assert small.max_num_seqs == 2 and small.max_num_batched_tokens == 2048
    with pytest.raises(ValueError, match="kv_tokens"):
        EngineConfig.scaled(0)


def test_kv_heads_replicate_past_tp():
    m = ModelSpec("gqa2", 4, 1024, 16, 2, 4096, 1000)
    c8 = ReplicaCost(m, H100, 8)
    assert c8.kv_bytes_per_token_gpu == 2 * 4 * 1 * 64 * 2  # one KV head per GPU, not 2/8


def test_layouts_that_do_not_fit_are_user_errors():
    with pytest.raises(UserError, match=r"tp=1 pp=1 does not fit Llama-2-70B on H100-SXM: 138.\d GB of weights"):
        ReplicaCost(llama2_70b(), H100, 1)
    with pytest.raises(UserError, match="tp must divide its 52 attention heads"):
        ReplicaCost(mha_30b(), H100, 8)
    with pytest.raises(UserError, match="pp exceeds"):
        ReplicaCost(ModelSpec("tiny", 2, 256, 4, 4, 512, 100), H100, 1, 4)
    with pytest.raises(ValueError, match="tp and pp"):
        ReplicaCost(llama2_70b(), H100, 0)


def test_gemm_efficiency_makes_per_gpu_throughput_fall_with_tp_at_fixed_batch():
    rates = {tp: ReplicaCost(llama2_70b(), H100, tp).decode_rate_per_gpu(batch=64) for tp in (2, 4, 8)}
    assert rates[2] > rates[4] > rates[8]
    # a constant-efficiency model on an ideal network has no reason to prefer small tp this much
    flat = {tp: ReplicaCost(llama2_70b(), H100, tp, gemm=GemmEfficiency.constant(0.8),
                            net=Interconnect(0, 0, 1e15, 0, 1e15), overhead_s=0).decode_rate_per_gpu(batch=64)
            for tp in (2, 8)}
    assert flat[8] / flat[2] > rates[8] / rates[2]


def test_cpu_spec_falls_back_to_constant_mfu():
    c = ReplicaCost(ModelSpec("tiny", 2, 256, 4, 4, 512, 100), HardwareSpec.cpu_2core())
    assert c.gemm.e_max == 1.0 and c.gemm(1, 1, 1) == 1.0
