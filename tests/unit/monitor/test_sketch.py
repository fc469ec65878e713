import math

import numpy as np
import pytest

from monitor.sketch import LogSketch


def test_empty_sketch_returns_nan():
    sketch = LogSketch()
    assert sketch.count == 0 and math.isnan(sketch.quantile(0.5))
    assert all(math.isnan(x) for x in sketch.quantiles([0.5, 0.99]))


@pytest.mark.parametrize("dist", ["lognormal", "pareto", "exponential", "uniform", "zeros_mixed"])
def test_relative_accuracy_against_numpy_lower_quantile(dist):
    rng = np.random.default_rng(7)
    data = {
        "lognormal": rng.lognormal(0, 2, 5000),
        "pareto": rng.pareto(1.1, 5000) + 1e-3,
        "exponential": rng.exponential(3, 5000),
        "uniform": rng.uniform(0.001, 100, 5000),
        "zeros_mixed": np.concatenate([np.zeros(1000), rng.exponential(1, 4000)]),
    }[dist]
    sketch = LogSketch()
    sketch.extend(data.tolist())
    for q in (0.0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0):
        exact = float(np.quantile(data, q, method="lower"))
        got = sketch.quantile(q)
        assert abs(got - exact) <= 0.01 * exact + 1e-12, (q, got, exact)
    qs = [0.5, 0.95, 0.99]
    assert sketch.quantiles(qs) == [sketch.quantile(q) for q in qs]


def test_serial_form_round_trips_and_accepts_redis_bytes():
    sketch = LogSketch()
    sketch.extend([0.0, 0.5, 1.0, 1.0, 20.0])
    flat = sketch.to_dict()
    assert flat["z"] == 1
    assert LogSketch.from_dict(flat) == sketch
    assert LogSketch.from_dict({k.encode(): str(v).encode() for k, v in flat.items()}) == sketch


def test_bad_values_and_parameters_are_named():
    with pytest.raises(ValueError, match="finite and >= 0, got -1"):
        LogSketch().add(-1)
    with pytest.raises(ValueError, match="relative_accuracy must be in"):
        LogSketch(relative_accuracy=1.5)
    with pytest.raises(ValueError, match="different parameters"):
        LogSketch().merge(LogSketch(relative_accuracy=0.02))
