"""The exposition fast path writes exactly what prometheus_client writes (no services needed)."""

from __future__ import annotations

import dataclasses
import gzip
import math
import random
import urllib.request

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from monitor.exporter.collector import build_registry, serve
from monitor.exporter.exposition import SliceFamily, SliceLabels, block_samples, format_value, make_block, render
from monitor.fold import fold
from monitor.slices import Slicer
from monitor.store.memory import MemoryStore
from tests.support.traces import NOW, PRICES, make_traces

ACCEPT = [
    None,
    "text/plain; version=0.0.4",
    "text/plain; version=1.0.0; escaping=underscores",
    "application/openmetrics-text; version=1.0.0",
    "application/openmetrics-text; version=1.0.0; escaping=allow-utf-8",
    "application/openmetrics-text; version=2.0.0",
    "application/openmetrics-text; version=1.0.0; escaping=dots",  # not a fast path: the library renders
    "application/openmetrics-text; version=1.0.0; escaping=values",
]
TRICKY = ['plain', 'with "quotes"', 'back\\slash', 'new\nline', 'ünïcödé ✓', '', 'a,b=c}{']
VALUES = [0, 1, -1, 7, 999_999, 1_000_000, 1_234_567, 10**15, -10**15, 2**53 + 1, 10**17, 0.0, -0.0, 0.5,
          1e-7, 1234567.25, 1e21, -3.5e-12, math.inf, -math.inf, math.nan]


def _without_duration(text: bytes) -> bytes:
    """The body without the scrape-duration sample, which differs from scrape to scrape (any escaping)."""
    return b"\n".join(line for line in text.split(b"\n")
                      if not (line.split(b" ")[0].endswith(b"duration__seconds")
                              or line.startswith(b"fleetmon_scrape_duration_seconds ")))


class _Families:
    def __init__(self, *families):
        self.families = families

    def collect(self):
        return list(self.families)


def tricky_store() -> MemoryStore:
    rng = random.Random(4)
    traces = make_traces(300, seed=9)
    for i, t in enumerate(traces):
        traces[i] = dataclasses.replace(t, tenant=rng.choice(TRICKY), tags={"team-name": rng.choice(TRICKY)})
    store = MemoryStore()
    slicer = Slicer(dimensions=("release", "arm", "task_type", "tenant", "locale", "team-name"))
    store.apply(fold(traces, slicer, NOW), "t:0", 0, len(traces) - 1)
    return store


@pytest.mark.parametrize("accept", ACCEPT)
def test_render_is_what_the_library_encoder_writes(accept):
    registry, _ = build_registry(tricky_store(), PRICES, now=lambda: NOW)
    body, content_type = render(registry, accept)
    encoder, expected_type = choose_encoder(accept or "")
    assert content_type == expected_type
    assert _without_duration(body) == _without_duration(encoder(registry))
    assert b'"with \\"quotes\\""' in body and b'"new\\nline"' in body and b'"back\\\\slash"' in body


def test_blocks_render_the_original_values_as_the_library_families_do():
    labels = SliceLabels(("tenant", "release"), ("back\\slash", 'q"uote'))
    gauge = GaugeMetricFamily("fleetmon_g", "g", labels=["tenant", "release", "window"])
    counter = CounterMetricFamily("fleetmon_c", "c", labels=["tenant", "release", "outcome"])
    histogram = HistogramMetricFamily("fleetmon_h_seconds", "h", labels=["tenant", "release"])
    ours = [SliceFamily("fleetmon_g", "g", "gauge"), SliceFamily("fleetmon_c", "c", "counter"),
            SliceFamily("fleetmon_h_seconds", "h", "histogram")]
    for value in VALUES:
        gauge.add_metric([*labels.values, "5m"], value)
        ours[0].add(labels, [("fleetmon_g", "5m", value)], "window")
        if not (isinstance(value, float) and math.isnan(value)):
            counter.add_metric([*labels.values, "x\ny"], value)
            ours[1].add(labels, [("fleetmon_c_total", "x\ny", value)], "outcome")
    histogram.add_metric(list(labels.values), [("0.1", 3), ("1.0", 1_500_000), ("+Inf", 2_000_000)], 12.5)
    ours[2].add(labels, [("fleetmon_h_seconds_bucket", "0.1", 3), ("fleetmon_h_seconds_bucket", "1.0", 1_500_000),
                         ("fleetmon_h_seconds_bucket", "+Inf", 2_000_000),
                         ("fleetmon_h_seconds_count", None, 2_000_000), ("fleetmon_h_seconds_sum", None, 12.5)], "le")
    for accept in ACCEPT[:6]:
        encoder, _type = choose_encoder(accept or "")
        assert render(_Families(*ours), accept)[0] == encoder(_Families(gauge, counter, histogram))
    # and the generic path (samples parsed back from the text) writes the same
    assert generate_latest(_Families(*ours)) == generate_latest(_Families(gauge, counter, histogram))


def test_format_value_is_float_to_go_string():
    rng = random.Random(0)
    ints = list(range(-3000, 3000)) + [rng.randint(-10**15 + 1, 10**6 - 1) for _ in range(20_000)]
    ints += [10**k + d for k in range(19) for d in (-1, 0, 1)] + [-10**k + d for k in range(19) for d in (-1, 0, 1)]
    for value in ints + VALUES + [rng.uniform(-1e9, 1e9) for _ in range(2000)] + [True, False]:
        assert format_value(value) == floatToGoString(value), value


def test_blocks_read_back_as_prometheus_clients_parser_reads_them():
    rng = random.Random(2)
    text = ""
    for _ in range(40):
        labels = SliceLabels(("tenant", "team"), (rng.choice(TRICKY), rng.choice(TRICKY) + rng.choice(TRICKY)))
        rows = [("fleetmon_x", rng.choice([None, "5m", 'o"dd\\']), rng.choice(VALUES)) for _ in range(3)]
        text += make_block(labels, rows, "window")
    text += "fleetmon_plain 3.0\n"
    ours = block_samples(text)
    theirs = [sample for family in text_string_to_metric_families(text) for sample in family.samples]
    assert len(ours) == len(theirs) == 121
    for a, b in zip(ours, theirs):
        assert (a.name, a.labels) == (b.name, b.labels)
        assert a.value == b.value or (math.isnan(a.value) and math.isnan(b.value))


def test_samples_are_the_text_read_back_and_foreign_samples_fall_back_to_the_library():
    labels = SliceLabels(("tenant",), ("a",))
    family = SliceFamily("fleetmon_g", "g", "gauge")
    family.add_block(make_block(labels, [("fleetmon_g", "5m", 3)], "window"))
    family.add_block(None)
    family.add_block("")
    assert [(s.name, s.labels, s.value) for s in family.samples] == [("fleetmon_g", {"tenant": "a", "window": "5m"},
                                                                      3.0)]
    assert family.sample_text() == 'fleetmon_g{tenant="a",window="5m"} 3.0\n'
    family.add_sample("fleetmon_g", {"tenant": "b"}, 4.0)
    assert family.sample_text() is None  # the library renders it from its samples
    assert [s.value for s in family.samples] == [3.0, 4.0]
    with pytest.raises(ValueError, match="already a slice label"):
        labels.text("tenant", "x")


def test_served_body_is_the_rendered_one_gzipped_and_other_requests_go_to_the_library():
    server = serve(tricky_store(), PRICES, port=0, host="127.0.0.1", now=lambda: NOW)
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        request = urllib.request.Request(base + "/metrics", headers={
            "Accept-Encoding": "gzip", "Accept": "application/openmetrics-text; version=1.0.0"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.headers["Content-Encoding"] == "gzip"
            assert response.headers["Content-Type"].startswith("application/openmetrics-text")
            body = gzip.decompress(response.read())
        expected, _type = render(server.registry, "application/openmetrics-text; version=1.0.0")
        assert _without_duration(body) == _without_duration(expected) and body.endswith(b"# EOF\n")
        options = urllib.request.Request(base + "/metrics", method="OPTIONS")
        with urllib.request.urlopen(options, timeout=10) as response:  # prometheus_client's own app answers
            assert response.headers["Allow"] == "OPTIONS,GET" and response.read() == b""
    finally:
        server.shutdown()
        server.server_close()


def test_label_texts_of_an_extra_label_are_its_texts_and_blocks_add_in_order():
    labels = SliceLabels(("tenant", "release"), ('q"uote', "r1"))
    texts = labels.texts("le", ("0.1", "+Inf"))
    assert texts == (labels.text("le", "0.1"), labels.text("le", "+Inf"))
    assert labels.texts("le", ("0.1", "+Inf")) is texts
    family = SliceFamily("fleetmon_g", "g", "gauge")
    family.add_blocks(["fleetmon_g{a=\"1\"} 1.0\n", None, "", "fleetmon_g{a=\"2\"} 2.0\n"])
    assert family.sample_text() == "fleetmon_g{a=\"1\"} 1.0\nfleetmon_g{a=\"2\"} 2.0\n"
    assert [s.value for s in family.samples] == [1.0, 2.0]
