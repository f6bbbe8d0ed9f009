import numpy as np
import pytest

from icml26.oserve.predictor import (
    AggregateLSTM,
    MovingAverage,
    TypeRatePredictor,
    rrmse,
    synthetic_counts,
)


def test_rrmse_closed_form():
    assert rrmse([1, 3], [2, 2]) == pytest.approx(0.5)


def test_per_type_lstm_beats_moving_average_on_periodic_mix():
    t = np.arange(400)[:, None]
    # two types in antiphase: the total is flat, the per-type series is a 20-minute sine
    counts = 100 + 60 * np.sin(2 * np.pi * (t / 20 + np.array([[0, 0.5]])))
    lstm = TypeRatePredictor(2, lookback=10, hidden=8, epochs=10, batch=16, lr=1e-2, seed=0).fit(counts[:300])
    ma = MovingAverage(10)
    test = counts[290:]
    e_lstm = rrmse(lstm.predict(test), test[10:])
    e_ma = rrmse(ma.predict(test), test[10:])
    assert e_lstm < 0.5 * e_ma


def test_shapes_and_bad_input():
    c = synthetic_counts(120, [1, 1, 2], 60, seed=0)
    assert c.shape == (120, 3) and c.dtype == np.int64
    assert MovingAverage(10).predict(c).shape == (110, 3)
    agg = AggregateLSTM(3, lookback=10, hidden=4, epochs=1).fit(c)
    p = agg.predict(c)
    np.testing.assert_allclose(p.sum(1), agg.net_.predict(c.sum(1, keepdims=True).astype(float))[:, 0], rtol=1e-5)
    with pytest.raises(ValueError, match="lookback \\(200\\) must be < the series length"):
        TypeRatePredictor(3, lookback=200).fit(c)
    with pytest.raises(ValueError, match="NaN"):
        MovingAverage(2).predict(np.array([[1.0], [np.nan], [2.0]]))
    with pytest.raises(ValueError, match="k must be >= 1"):
        TypeRatePredictor(0)
