"""The loader's fast path builds exactly what validate() builds, and never accepts what it rejects."""

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.offline.fastpath import fast_compact
from monitor.schema import TraceError, validate

FIELDS = ("trace_id", "task_id", "model_id", "ts", "success", "tokens_in", "tokens_cached_in", "tokens_out",
          "fees_usd", "latency_seconds", "steps", "tags", "harmful_action", "refused", "benign", "task_type",
          "tenant", "locale")

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**13), st.floats(allow_nan=True),
                    st.text(max_size=5), st.text(min_size=250, max_size=260))
plain_text = st.text(alphabet=st.characters(codec="utf-8"), min_size=0, max_size=12)


@st.composite
def records(draw):
    record = {}
    for key in ("agent", "task"):
        if draw(st.integers(0, 9)):
            record[key] = draw(st.one_of(plain_text, scalars))
    for key, plain in (("ok", st.booleans()), ("tin", st.integers(0, 50_000)), ("tout", st.integers(0, 5_000)),
                       ("tin_cached", st.integers(0, 60_000)), ("steps", st.integers(0, 30)),
                       ("trial", st.integers(0, 9)), ("lat", st.floats(0, 1e3)), ("fees", st.floats(0, 10))):
        if draw(st.integers(0, 2)):
            record[key] = draw(plain) if draw(st.integers(0, 5)) else draw(scalars)
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.one_of(plain_text, st.sampled_from(["harmful_action", "refused", "benign", "tags", "trace_id",
                                                          "task_type", "x\u202e", "ok"])))
        record[key] = draw(st.one_of(plain_text, scalars, st.lists(st.integers(), max_size=2)))
    return record


def _same(fast, trace):
    for name in FIELDS:
        a, b = getattr(fast, name), getattr(trace, name)
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            continue
        assert a == b and type(a) is type(b), (name, a, b)


@settings(max_examples=2000, deadline=None)
@given(records())
def test_fast_path_agrees_with_validate(record):
    fast = fast_compact(dict(record))
    try:
        trace = validate(dict(record))
    except TraceError:
        assert fast is None, f"fast path accepted a record validate rejects: {record!r}"
        return
    if fast is not None:
        _same(fast, trace)


def test_the_plain_record_takes_the_fast_path():
    record = {"agent": "A", "task": "t1", "trial": 2, "ok": True, "tin": 10, "tout": 3, "steps": 4, "lat": 1.5,
              "category": "refund", "n": 3, "flag": False}
    fast = fast_compact(record)
    assert fast is not None
    _same(fast, validate(record))
    assert fast_compact({**record, "tin": -1}) is None and fast_compact({**record, "refused": True}) is None
