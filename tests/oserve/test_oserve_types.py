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
