"""The fp32-vs-float64 tolerance of tests/conftest.py: it holds for any summation order, and a
one-term error is far above it."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 4000), seed=st.integers(0, 2**31 - 1), spread=st.floats(1e-3, 1e3))
def test_bound_holds_in_any_order_and_catches_a_dropped_term(fp32_atol, n, seed, spread):
    rng = np.random.default_rng(seed)
    terms = (rng.standard_normal(n) * spread).astype(np.float32)
    exact = float(np.sum(terms.astype(np.float64)))
    tol = fp32_atol(n, float(np.abs(terms.astype(np.float64)).sum()))
    for order in (np.arange(n), rng.permutation(n), np.argsort(terms)):
        acc = np.float32(0)
        for x in terms[order]:  # recursive summation, the worst case the bound covers
            acc = np.float32(acc + x)
        assert abs(float(acc) - exact) <= tol
        pairwise = float(np.sum(terms[order], dtype=np.float32))
        assert abs(pairwise - exact) <= tol
    big = int(np.argmax(np.abs(terms)))
    assert abs(exact - (exact - float(terms[big]))) > tol  # a dropped term is caught


def test_bad_arguments(fp32_atol):
    with pytest.raises(ValueError, match="n_terms"):
        fp32_atol(0, 1.0)
    with pytest.raises(ValueError, match="magnitude"):
        fp32_atol(3, float("nan"))
