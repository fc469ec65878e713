"""The exporter's sample lines (monitor/exporter/exposition.py ``format_value`` and ``sample_lines``, native
and Python) write each value as prometheus_client's ``floatToGoString`` does, on any int or float."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from prometheus_client.utils import floatToGoString

from monitor.exporter import exposition
from monitor.exporter.exposition import format_value, sample_lines

native = pytest.mark.skipif(exposition._native_sample_lines is None,
                            reason="fleetmon_native is not built (`make install`)")

ints = st.one_of(st.integers(-10**6, 10**6), st.integers(-(2**70), 2**70),
                 st.integers(0, 60).map(lambda k: 10**k // 3), st.booleans())
floats = st.floats(allow_nan=True, allow_infinity=True)
#: Values m / 2**f with few binary decimals: where two shortest decimal strings can be equally close
#: (repr takes the even one), at every magnitude below 1e6 (e.g. 524288 + 2**-11: repr ...812, not ...813).
halfway = st.builds(lambda m, f, sign: sign * m / 2**f, st.integers(1, 2**53 - 1), st.integers(1, 40),
                    st.sampled_from([1, -1]))
values = st.one_of(ints, floats, halfway, st.floats(-1e6, 1e6), st.floats(1e-330, 1e-300))
EXAMPLES = [0, -0.0, 0.0, 1e-320, 5e-324, math.inf, -math.inf, math.nan, 10**15, 10**15 - 1, -10**15 + 1, 2**53 + 1,
            10**30, 999_999, 1_000_000, 999_999.9999999999, 1e6, -1e6, 524288 + 2**-11, 0.1, 1 / 3, True]


def _line(name: str, text: str, value: float) -> str:
    return f"{name}{text} {floatToGoString(value)}\n"


@settings(max_examples=3000, deadline=None)
@given(value=values)
def test_format_value_is_float_to_go_string(value):
    assert format_value(value) == floatToGoString(value)


@pytest.mark.parametrize("use_native", [pytest.param(True, marks=native), False])
@settings(max_examples=400, deadline=None)
@given(block=st.lists(values, max_size=40), texts=st.lists(st.text(max_size=8), min_size=40, max_size=40),
       one_text=st.booleans())
@example(block=EXAMPLES, texts=["{a=\"x\"}"] * 40, one_text=True)
def test_sample_lines_are_the_library_lines(use_native, block, texts, one_text):
    """Per line, floatToGoString of the value after the name and label text (one str or one per line)."""
    names = [f"m{i}" for i in range(len(block))]
    got = sample_lines(names, texts[0] if one_text else texts, block, native=use_native)
    assert got == [_line(name, texts[0] if one_text else text, value)
                   for name, text, value in zip(names, texts, block)]


@pytest.mark.parametrize("use_native", [pytest.param(True, marks=native), False])
def test_none_stays_none_and_the_shortest_sequence_decides(use_native):
    lines = sample_lines(["a", "b", "c", "d"], ["{x=\"1\"}", "", "{é=\"✓\"}"], [0.5, None, 7, 1.0], native=use_native)
    assert lines == ["a{x=\"1\"} 0.5\n", None, "c{é=\"✓\"} 7.0\n"]
    assert sample_lines(["a", "b"], "{}", [1e-05, -2.5e+16], native=use_native) == ["a{} 1e-05\n", "b{} -2.5e+16\n"]


@native
@settings(max_examples=3000, deadline=None)
@given(value=values)
def test_native_lines_are_python_lines(value):
    assert sample_lines(["n"], "", [value]) == sample_lines(["n"], "", [value], native=False) == [_line("n", "", value)]
