import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.core.errors import UserError
from icml26.sim.gemm import MIN_PROFILE_ROWS, GemmEfficiency, gemm_table

H100_PEAK = 989e12


def test_table_reproduces_each_published_anchor():
    # the shipped anchors: measured max achievable matmul TFLOP/s at the best shape found
    anchors = {"H100-SXM": ((6144, 17920, 2816), 792.1 / 989), "A100-SXM": ((6912, 16384, 2048), 267.9 / 312),
               "H200": ((11264, 19712, 1536), 821.0 / 989)}
    table = gemm_table()
    assert set(anchors) <= set(table)
    for name, (shape, eff) in anchors.items():
        g = table[name]
        assert g(*shape) == pytest.approx(eff, rel=1e-12)
        assert 0 < g.e_max <= 1 and g.source


def test_small_per_gpu_gemms_are_less_efficient():
    g = GemmEfficiency.for_gpu("H100-SXM")
    # Llama-2-70B FFN up-projection, 256 tokens: tp 1 vs tp 8 per-GPU shapes
    assert g(256, 2 * 28672 / 8, 8192) < g(256, 2 * 28672, 8192)
    assert g(8192, 8192, 8192) > 0.75  # large GEMMs near the plateau
    with pytest.raises(KeyError, match="H100-SXM"):
        GemmEfficiency.for_gpu("TPU")


dims = st.floats(min_value=1, max_value=1e5, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(m=dims, n=dims, k=dims, dm=st.floats(0, 1e4), dn=st.floats(0, 1e4), dk=st.floats(0, 1e4),
       name=st.sampled_from(sorted(gemm_table())))
def test_efficiency_monotone_in_each_dimension_and_at_most_one(m, n, k, dm, dn, dk, name):
    g = gemm_table()[name]
    e = g(m, n, k)
    assert 0 < e <= g.e_max <= 1
    tol = 1e-12
    assert g(m + dm, n, k) >= e - tol
    assert g(m, n + dn, k) >= e - tol
    assert g(m, n, k + dk) >= e - tol
    assert g(m + dm, n + dn, k + dk) >= e - tol


@settings(max_examples=100, deadline=None)
@given(e=st.floats(0.05, 1.0), mh=st.floats(0, 500), mnh=st.floats(0, 1e8), kh=st.floats(0, 2000),
       m=dims, n=dims, k=dims)
def test_any_valid_parameters_give_efficiency_in_unit_interval(e, mh, mnh, kh, m, n, k):
    g = GemmEfficiency(e, mh, mnh, kh)
    assert 0 < g(m, n, k) <= e
    assert g.seconds(m, n, k, H100_PEAK) >= 2 * m * n * k / H100_PEAK


def _grid():
    return [(m, n, k) for m in (1, 16, 128, 1024, 8192) for n in (512, 4096, 28672) for k in (256, 2048, 8192)]


@pytest.mark.parametrize("column", ["seconds", "tflops"])
def test_profile_round_trip(tmp_path, column):
    true = GemmEfficiency(0.82, 24.0, 2.0e6, 200.0)
    lines = [f"M,N,K,{column}"]
    for m, n, k in _grid():
        sec = true.seconds(m, n, k, H100_PEAK)
        lines.append(f"{m},{n},{k},{sec!r}" if column == "seconds" else f"{m},{n},{k},{2 * m * n * k / sec / 1e12!r}")
    p = tmp_path / "gemm.csv"
    p.write_text("\ufeff" + "\n".join(lines) + "\n", encoding="utf-8")  # a BOM is accepted
    fit = GemmEfficiency.from_profile(p, H100_PEAK)
    for f in ("e_max", "m_half", "mn_half", "k_half"):
        assert getattr(fit, f) == pytest.approx(getattr(true, f), rel=1e-3)
    assert fit.source == str(p)
    for shape in [(3, 1000, 777), (5000, 300, 64)]:
        assert fit(*shape) == pytest.approx(true(*shape), rel=1e-3)


def test_profile_from_rows_with_noise_stays_close():
    true = GemmEfficiency.for_gpu("H100-SXM")
    rows = []
    for i, (m, n, k) in enumerate(_grid()):
        jitter = 1 + 0.03 * math.sin(7 * i)  # +-3% measurement noise, deterministic
        rows.append({"M": m, "N": n, "K": k, "tflops": min(true(m, n, k) * jitter, 1.0) * 989})
    fit = GemmEfficiency.from_profile(rows, H100_PEAK)
    for m, n, k in _grid():
        assert fit(m, n, k) == pytest.approx(true(m, n, k), rel=0.08)


@pytest.mark.parametrize("body,match", [
    ("M,N,seconds\n1,2,3\n", r"needs columns M, N, K and seconds or tflops; got M, N, seconds"),
    ("M,N,K\n1,2,3\n", "seconds or tflops"),
    ("M,N,K,seconds\n" + "64,64,64,1e-3\n" * 3 + "64,x,64,1e-3\n", r"row 4, field 'N': expected a number; got 'x'"),
    ("M,N,K,tflops\n64,64,0,5\n", r"row 1, field 'K': must be > 0"),
    ("M,N,K,seconds\n64,64,64,-1\n", r"row 1, field 'seconds': must be > 0"),
    ("M,N,K,tflops\n8192,8192,8192,2000\n", r"row 1: 2000.0 TFLOP/s exceeds the peak 989.0"),
    ("M,N,K,tflops\n" + "1024,1024,1024,500\n" * (MIN_PROFILE_ROWS - 1), f"needs at least {MIN_PROFILE_ROWS} rows; got {MIN_PROFILE_ROWS - 1}"),
    ("", "no header"),
])
def test_bad_profiles_name_file_row_and_field(tmp_path, body, match):
    p = tmp_path / "bad_gemm.csv"
    p.write_text(body)
    with pytest.raises(UserError, match=match) as info:
        GemmEfficiency.from_profile(p, H100_PEAK)
    assert "bad_gemm.csv" in str(info.value)


def test_missing_profile_and_bad_peak(tmp_path):
    with pytest.raises(UserError, match="not found"):
        GemmEfficiency.from_profile(tmp_path / "nope.csv", H100_PEAK)
    with pytest.raises(ValueError, match="peak_flops"):
        GemmEfficiency.from_profile([], 0)
    with pytest.raises(ValueError, match="e_max"):
        GemmEfficiency(1.2)
