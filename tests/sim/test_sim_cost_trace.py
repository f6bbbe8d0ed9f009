import numpy as np
import pytest

from icml26.core.errors import UserError
from icml26.sim import (
    HardwareSpec,
    LinearCost,
    ModelSpec,
    Request,
    RooflineCost,
    load_trace,
    write_trace,
)
from icml26.sim.trace import LengthDist, RequestType, synthetic_trace


def test_modelspec_llama8b_params_and_kv():
    m = ModelSpec.llama3_8b()
    assert 7.9e9 < m.n_params < 8.1e9
    assert m.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2  # 128 KiB per token
    hf = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
          "intermediate_size": 14336, "vocab_size": 128256}
    assert ModelSpec.from_hf_config(hf, name="x").n_params == m.n_params


@pytest.mark.parametrize("cost", [RooflineCost(ModelSpec.llama3_8b(), HardwareSpec.h100()),
                                  RooflineCost(ModelSpec.llama3_70b(), HardwareSpec.h200(), tp=4),
                                  LinearCost(0.01, 1e-4, 2e-4, 3e-7)])
def test_decode_run_time_is_sum_of_iterations(cost):
    ctx = np.array([10, 500, 3000, 77])
    for k in (1, 2, 17, 400):
        ref = sum(cost.iteration_time([], ctx + j) for j in range(k))
        assert cost.decode_run_time(ctx, k) == pytest.approx(ref, rel=1e-10)


def test_roofline_regimes():
    c = RooflineCost(ModelSpec.llama3_8b(), HardwareSpec.h100())
    one = c.iteration_time([], [100])
    # small-batch decode is memory bound: 16 GB of weights at 0.7 * 3.35 TB/s ~ 6.8 ms (+4 ms overhead)
    assert one == pytest.approx(16.06e9 / (0.7 * 3.35e12) + 0.004, rel=0.02)
    big = c.iteration_time([(8192, 0)])
    assert big > 10 * one  # a long prefill is compute bound
    assert c.forward_time([5], [100]) > one


def test_linear_cost_fit_recovers_coefficients(tmp_path):
    rng = np.random.default_rng(0)
    true = LinearCost(0.005, 2e-5, 1e-4, 3e-8)
    rows = []
    for _ in range(50):
        b = int(rng.integers(1, 64))
        new = [int(rng.integers(1, 200)) for _ in range(b)]
        ctx = [int(rng.integers(0, 4000)) for _ in range(b)]
        rows.append({"new_tokens": sum(new), "num_seqs": b, "context_tokens": sum(ctx),
                     "time_s": true.forward_time(new, ctx)})
    p = tmp_path / "prof.csv"
    p.write_text("new_tokens,num_seqs,context_tokens,time_s\n" + "\n".join(
        f"{r['new_tokens']},{r['num_seqs']},{r['context_tokens']},{r['time_s']!r}" for r in rows))
    fit = LinearCost.fit(p)
    for f in ("a", "b_new", "b_seq", "c_ctx"):
        assert getattr(fit, f) == pytest.approx(getattr(true, f), rel=1e-4)
    with pytest.raises(UserError, match="row 1"):
        LinearCost.fit([{"new_tokens": "x", "num_seqs": 1, "context_tokens": 1, "time_s": 1}] * 4)


def _reqs():
    return [Request(0, 0.0, 10, 5), Request(1, 1.25, 300, 1), Request(2, 3.5000001, 7, 250)]


def test_azure_round_trip(tmp_path):
    p = write_trace(tmp_path / "az.csv", _reqs(), schema="azure")
    assert "TIMESTAMP" in p.read_text().splitlines()[0]
    back = load_trace(p)
    assert [(r.prompt_tokens, r.output_tokens) for r in back] == [(10, 5), (300, 1), (7, 250)]
    np.testing.assert_allclose([r.arrival_s for r in back], [0.0, 1.25, 3.5000001], atol=2e-6)


def test_azure_2024_utc_offset(tmp_path):
    p = tmp_path / "az24.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.0090000+00:00,10,2\n"
                 "2024-05-10 00:00:01.5090000+00:00,20,3\n")
    assert [r.arrival_s for r in load_trace(p)] == pytest.approx([0.0, 1.5])


def test_burstgpt_failures_dropped_and_counted(tmp_path):
    p = tmp_path / "b.csv"
    p.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                 "5,ChatGPT,100,20,120,Conversation log\n6,GPT-4,50,0,50,Conversation log\n"
                 "7.5,GPT-4,30,9,39,API log\n")
    reqs, dropped = load_trace(p, return_dropped=True)
    assert dropped == 1 and [r.arrival_s for r in reqs] == [5.0, 7.5] and reqs[1].type == "GPT-4"
    q = write_trace(tmp_path / "b2.csv", reqs, schema="burstgpt")
    assert [(r.prompt_tokens, r.output_tokens) for r in load_trace(q)] == [(100, 20), (30, 9)]


def test_native_round_trip_keeps_prompt(tmp_path):
    reqs = [Request(0, 0.5, 3, 4, prompt='say "hi",\nthen stop', type="chat")]
    back = load_trace(write_trace(tmp_path / "n.csv", reqs))
    assert back[0].prompt == reqs[0].prompt and back[0].type == "chat" and back[0].arrival_s == 0.5


@pytest.mark.parametrize("body,match", [
    ("a,b,c\n1,2,3\n", "unknown trace header"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,-3,2\n", "row 1, column 'ContextTokens'"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,3,2\n", "row 1, column 'TIMESTAMP'"),
    ("arrival_s,prompt_tokens,output_tokens\n0,3,2.5\n", "row 1, column 'output_tokens'"),
])
def test_bad_trace_files(tmp_path, body, match):
    p = tmp_path / "bad.csv"
    p.write_text(body)
    with pytest.raises(UserError, match=match):
        load_trace(p)


def test_synthetic_trace_rates_and_burstiness():
    tr = synthetic_trace(20000, rate=10.0, burstiness=1.0, seed=1)
    gaps = np.diff([r.arrival_s for r in tr])
    assert gaps.mean() == pytest.approx(0.1, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)
    bursty = np.diff([r.arrival_s for r in synthetic_trace(20000, rate=10.0, burstiness=0.25, seed=1)])
    assert bursty.std() / bursty.mean() == pytest.approx(2.0, rel=0.08)  # CV = 1/sqrt(shape)
    mix = [RequestType("a", 1, LengthDist("const", np.log(5)), LengthDist("const", np.log(7))),
           RequestType("b", 3, LengthDist("const", np.log(50)), LengthDist("const", np.log(70)))]
    tr = synthetic_trace(4000, 5.0, mix=mix, seed=0)
    share = np.mean([r.type == "b" for r in tr])
    assert share == pytest.approx(0.75, abs=0.03)
    assert {(r.prompt_tokens, r.output_tokens) for r in tr} == {(5, 7), (50, 70)}
    with pytest.raises(ValueError, match="rate"):
        synthetic_trace(10, rate=0)
