from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.sketch import LogSketch

values = st.lists(st.one_of(st.just(0.0), st.floats(min_value=1e-6, max_value=1e6)), max_size=60)


def sketch_of(xs):
    s = LogSketch()
    s.extend(xs)
    return s


@settings(max_examples=150, deadline=None)
@given(values, values, values)
def test_merge_is_associative_commutative_and_equals_union(a, b, c):
    sa, sb, sc = sketch_of(a), sketch_of(b), sketch_of(c)
    assert sa + sb == sb + sa
    assert (sa + sb) + sc == sa + (sb + sc)
    assert sa + sb + sc == sketch_of(a + b + c)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.floats(min_value=1e-6, max_value=1e6), min_size=1, max_size=200),
       st.floats(min_value=0, max_value=1))
def test_quantile_within_relative_accuracy(xs, q):
    import math
    got = sketch_of(xs).quantile(q)
    exact = sorted(xs)[math.floor(q * (len(xs) - 1))]
    assert abs(got - exact) <= 0.01 * exact * (1 + 1e-9)
