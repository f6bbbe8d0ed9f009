import json

import numpy as np
import pytest

from icml26.oserve.types import WorkloadTypes
from icml26.oserve.workload import make_trace


def test_kmeans_recovers_types():
    reqs = make_trace(800, 2.0, [0.25] * 4, seed=0)
    wt = WorkloadTypes(4, seed=0).fit(reqs)
    lab = wt.assign(reqs)
    truth = np.array([r.type for r in reqs])
    # each fitted cluster is (nearly) one true type
    purity = sum(max((truth[lab == j] == t).sum() for t in set(truth)) for j in range(4)) / len(reqs)
    assert purity > 0.97
    counts = wt.per_minute_counts(reqs)
    assert counts.sum() == len(reqs) and counts.shape[1] == 4
    m = (np.array([r.arrival_s for r in reqs]) // 60).astype(int)
    np.testing.assert_array_equal(counts.sum(1), np.bincount(m))


def test_types_bad_input():
    with pytest.raises(ValueError, match="k must be >= 1"):
        WorkloadTypes(0)
    with pytest.raises(ValueError, match="at least k=4 requests"):
        WorkloadTypes(4).fit(make_trace(3, 1.0, [0.25] * 4, seed=0))


def test_classifier_round_trips_and_checks_its_version():
    reqs = make_trace(600, 2.0, [0.4, 0.3, 0.2, 0.1], seed=1)
    wt = WorkloadTypes(4, seed=0).fit(reqs)
    back = WorkloadTypes.from_dict(json.loads(json.dumps(wt.to_dict())))
    np.testing.assert_array_equal(back.assign(reqs), wt.assign(reqs))
    np.testing.assert_allclose(back.input_posterior([10, 300, 3000]), wt.input_posterior([10, 300, 3000]))
    with pytest.raises(ValueError, match="classifier version 0"):
        WorkloadTypes.from_dict({**wt.to_dict(), "version": 0})
    with pytest.raises(ValueError, match=r"lacks field\(s\) \['centroids'\]"):
        WorkloadTypes.from_dict({k: v for k, v in wt.to_dict().items() if k != "centroids"})


def test_input_only_classifier_separates_types_by_prompt_length():
    reqs = make_trace(800, 2.0, [0.25] * 4, seed=0)
    wt = WorkloadTypes(4, seed=0).fit(reqs)
    lab, by_input = wt.assign(reqs), wt.assign_input(reqs)
    # long prompts (long-in, long/long) vs short prompts (short/short, long-out): input alone
    # tells the two groups apart, never the output within a group
    long_prompt = wt.centroids_[:, 0] > 0
    assert np.mean(long_prompt[lab] == long_prompt[by_input]) > 0.97
    p = wt.input_posterior([r.prompt_tokens for r in reqs])
    np.testing.assert_allclose(p.sum(1), 1.0)
    assert p[:, ~long_prompt].sum(1).mean() > 0.4  # ~half the mass: short/short and long-out share inputs
    # a predicted output length (e.g. from TIE) recovers the full type
    pred = wt.assign_predicted([r.prompt_tokens for r in reqs], [r.output_tokens for r in reqs])
    np.testing.assert_array_equal(pred, lab)
