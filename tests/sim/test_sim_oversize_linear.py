import numpy as np
import pytest

from icml26.core.errors import UserError
from icml26.sim import Engine, EngineConfig, FCFSQueue, LinearCost, Request, simulate
from icml26.sim.cluster import Deployment, simulate_cluster
from icml26.sim.engine import Router


# ---- a request larger than the KV cache
def test_oversize_request_is_a_user_error_naming_it():
    eng = Engine(EngineConfig(kv_tokens=64), LinearCost(1.0, 0.0), FCFSQueue())
    reqs = [Request("ok", 0.0, 10, 5), Request("huge-7", 1.0, 60, 10)]
    with pytest.raises(UserError, match=r"request 'huge-7' needs 60 \+ 10 = 70 KV tokens .* \(64 tokens, 4 blocks\)"):
        simulate(reqs, eng)


def test_oversize_request_dropped_and_counted_while_the_rest_is_served():
    eng = Engine(EngineConfig(kv_tokens=64, oversize="drop"), LinearCost(1.0, 0.0), FCFSQueue())
    reqs = [Request("a", 0.0, 10, 5), Request("big", 0.5, 60, 10), Request("b", 1.0, 8, 3)]
    recs = simulate(reqs, eng)
    assert [r.id for r in recs] == ["a", "b"]
    assert [r.id for r in eng.rejected] == ["big"]
    # "b" is unaffected by the refused request: it starts when "a" frees the batch slot or at once
    no_big = Engine(EngineConfig(kv_tokens=64), LinearCost(1.0, 0.0), FCFSQueue())
    ref = simulate([reqs[0], reqs[2]], no_big)
    assert [(r.first_token_s, r.finish_s) for r in recs] == [(r.first_token_s, r.finish_s) for r in ref]


def test_oversize_in_a_cluster_is_dropped_per_engine():
    def make(i):
        return Engine(EngineConfig(kv_tokens=64, oversize="drop"), LinearCost(0.1, 0.0), FCFSQueue())
    dep = Deployment(["x"], make, Router())
    recs, _ = simulate_cluster([Request(0, 0.0, 5, 5), Request(1, 0.1, 100, 1)], [(0.0, dep)])
    assert [r.id for r in recs] == [0]


def test_oversize_field_is_validated():
    with pytest.raises(ValueError, match="oversize must be 'error' or 'drop'"):
        EngineConfig(oversize="skip")


# ---- LinearCost with the quadratic prefill-attention term
def test_quadratic_attention_term_closed_form():
    c = LinearCost(a=0.01, b_new=1e-5, b_seq=1e-4, c_ctx=2e-7, d_attn=3e-9)
    # one prefill of 1000 tokens on 0 cached + one decode on 500 cached
    pairs = 1000 * 1001 / 2 + (500 + 1)
    want = 0.01 + 1e-5 * 1001 + 1e-4 * 2 + 2e-7 * (1000 + 501) + 3e-9 * pairs
    assert c.forward_time([1000, 1], [0, 500]) == pytest.approx(want, rel=1e-12)
    # doubling a prefill more than doubles its attention part
    base = LinearCost(0.0, 0.0, d_attn=1.0)
    assert base.forward_time([2000], [0]) > 3.9 * base.forward_time([1000], [0])


def test_decode_run_time_with_attention_term():
    c = LinearCost(0.01, 1e-4, 2e-4, 3e-7, d_attn=5e-8)
    ctx = np.array([10, 500, 3000])
    for k in (1, 5, 60):
        assert c.decode_run_time(ctx, k) == pytest.approx(sum(c.iteration_time([], ctx + j) for j in range(k)), rel=1e-12)


def test_fit_recovers_the_attention_coefficient(tmp_path):
    rng = np.random.default_rng(1)
    true = LinearCost(0.004, 3e-5, 1e-4, 2e-8, d_attn=4e-10)
    lines = ["new_tokens,num_seqs,context_tokens,attn_tokens,time_s"]
    for i in range(60):
        b = int(rng.integers(1, 16))
        new = [int(rng.integers(1, 2000)) if i % 2 else 1 for _ in range(b)]
        ctx = [int(rng.integers(0, 4000)) for _ in range(b)]
        att = sum(n * c + n * (n + 1) / 2 for n, c in zip(new, ctx, strict=True))
        lines.append(f"{sum(new)},{b},{sum(ctx)},{att},{true.forward_time(new, ctx)!r}")
    p = tmp_path / "prof.csv"
    p.write_text("\n".join(lines))
    fit = LinearCost.fit(p)
    for f in ("a", "b_new", "b_seq", "c_ctx", "d_attn"):
        assert getattr(fit, f) == pytest.approx(getattr(true, f), rel=1e-4)
    # without the column the old 4-coefficient fit is unchanged
    old = LinearCost.fit([{"new_tokens": n, "num_seqs": 1, "context_tokens": 0, "time_s": 0.01 + 1e-5 * n}
                          for n in (1, 10, 100, 1000, 3000)])
    assert old.d_attn == 0.0 and old.b_new == pytest.approx(1e-5, rel=1e-6)


def test_fit_attention_column_errors():
    rows = [{"new_tokens": 10, "num_seqs": 2, "context_tokens": 0, "time_s": 0.1, "attn_tokens": ""},
            {"new_tokens": 10, "num_seqs": 1, "context_tokens": 0, "time_s": 0.1, "attn_tokens": "55"}]
    with pytest.raises(UserError, match="row 1, field 'attn_tokens': missing"):
        LinearCost.fit(rows * 3)
    with pytest.raises(UserError, match="at least 5 rows"):
        LinearCost.fit(rows[1:] * 4)
    with pytest.raises(ValueError, match="d_attn"):
        LinearCost(0.0, 0.0, d_attn=-1.0)
