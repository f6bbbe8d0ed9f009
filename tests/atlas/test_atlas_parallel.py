"""Adaptive tests fanned out over processes give the same results as in process."""

import numpy as np
import pytest

from icml26.atlas import AdaptiveTest
from icml26.atlas.parallel import parse_jobs, run_tests
from icml26.atlas.synth import random_bank, simulate
from icml26.core.errors import UserError


def test_processes_equal_in_process_and_direct_loop():
    bank = random_bank(120, "2PL", seed=4)
    Y = simulate(bank, np.random.default_rng(0).standard_normal(9), seed=1, missing=0.1)
    here = run_tests(bank, Y, seed=50, se_stop=0.3, min_items=10, max_items=40)
    for m, r in enumerate(here):  # model m uses seed + m, as AdaptiveTest alone would
        cat = AdaptiveTest(
            bank, se_stop=0.3, min_items=10, max_items=40, seed=50 + m, allowed=~np.isnan(Y[m])
        )
        res = cat.run_indices(np.nan_to_num(Y[m]).astype(int))
        assert r["administered"] == res.items and r["theta"] == res.theta
        assert all(not np.isnan(Y[m, bank.index([i])[0]]) for i in r["administered"])
    fanned = run_tests(bank, Y, jobs=2, chunk=2, seed=50, se_stop=0.3, min_items=10, max_items=40)
    assert fanned == here


def test_bad_jobs_and_settings():
    bank = random_bank(20, "2PL", seed=1)
    with pytest.raises(UserError, match="--jobs"):
        parse_jobs("many")
    with pytest.raises(UserError, match="--jobs must be >= 1"):
        parse_jobs(0)
    assert (
        parse_jobs("1") is None and parse_jobs("3") == 3 and parse_jobs("ray://h:1") == "ray://h:1"
    )
    with pytest.raises(UserError, match="se_stop"):
        run_tests(bank, np.zeros((2, 20)), jobs=2, se_stop=0)
    with pytest.raises(UserError, match="aligned to the bank"):
        run_tests(bank, np.zeros((2, 19)))
