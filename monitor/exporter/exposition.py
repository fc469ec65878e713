"""Exposition: families built from the metric table, per-slice samples rendered once and reused.

:func:`metric_family` and :meth:`SliceFamily.of` are the only builders of the exporter's
families; both take a :class:`~monitor.exporter.families.MetricSpec`. A :class:`SliceFamily`
holds its samples as blocks — one slice's lines of one family, rendered once
(:func:`make_block`) — so a collector can hand the same block to the next scrape while the
slice's aggregate is unchanged (why: docs/metrics.md, "Scrape cost").

Guarantee: :func:`render` returns byte for byte what prometheus_client's encoder for the
request's ``Accept`` header returns for the same registry (``generate_latest`` or the
OpenMetrics one), and a SliceFamily's ``samples`` are exactly the samples its text describes
(read back from that text, so values are floats). A block's lines are written in one call
(:func:`sample_lines`, natively when the extension is built; each value as ``floatToGoString``
writes it). Only SliceFamily sample lines are written
here; ``# HELP``/``# TYPE`` lines, other families and the trailer come from the library's
encoder. The fast path covers the encoders that write legacy-valid names as is (escaping
``underscores``, the default, and ``allow-utf-8``); any other encoder renders the whole
registry itself. :func:`make_app` serves :func:`render` as WSGI (gzip when accepted) and hands
everything else (``name[]`` filters, other methods) to prometheus_client's app, and after each
scrape returns the heap it freed to the operating system (:mod:`monitor.exporter.heap`);
:func:`start_server` runs it like ``prometheus_client.start_http_server``.
"""

from __future__ import annotations

import gzip
import math
import re
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from typing import Any, overload
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import exposition as text_format
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer, choose_encoder, gzip_accepted, make_wsgi_app
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from monitor.exporter.families import MetricSpec
from monitor.exporter.heap import release_freed_memory

try:  # the sample lines of native/src/render.rs (an extension built before them: Python)
    from fleetmon_native import sample_lines as _native_sample_lines
except ImportError:  # pragma: no cover - a tree without `make install`
    _native_sample_lines = None

#: Escapings under which the library writes our (legacy-valid) names unchanged.
_FAST_ESCAPINGS = (openmetrics.UNDERSCORES, openmetrics.ALLOWUTF8)


def escape_label_value(value: str) -> str:
    """A label value as both text formats write it (backslash, newline, double quote)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class SliceLabels:
    """One slice's label names and values, with its rendered label sets cached.

    Names must be valid Prometheus label names (the exporter sanitises slice
    dimensions into such names); a family's extra label (``window``,
    ``outcome``, ``le``, …) is added per sample and must not be one of them.
    """

    __slots__ = ("names", "values", "_pairs", "_text", "_texts")

    def __init__(self, names: Sequence[str], values: Sequence[str]) -> None:
        if len(names) != len(values):
            raise ValueError(f"{len(names)} label names {list(names)} but {len(values)} values {list(values)}")
        self.names = tuple(names)
        self.values = tuple(values)
        self._pairs = [(name, escape_label_value(value)) for name, value in zip(self.names, self.values)]
        self._text: dict[tuple[str | None, str | None], str] = {}
        self._texts: dict[tuple[str, tuple[str, ...]], tuple[str, ...]] = {}

    def text(self, extra_name: str | None = None, extra_value: str | None = None) -> str:
        """``{a="x",b="y"}`` with the labels sorted by name, as the encoders write them."""
        key = (extra_name, extra_value)
        text = self._text.get(key)
        if text is None:
            pairs = self._pairs
            if extra_name is not None:
                if extra_name in self.names:
                    raise ValueError(f"extra label {extra_name!r} is already a slice label of {self.names}")
                pairs = [*pairs, (extra_name, escape_label_value(extra_value or ""))]
            text = "{" + ",".join(f'{name}="{value}"' for name, value in sorted(pairs)) + "}" if pairs else ""
            self._text[key] = text
        return text

    def texts(self, extra_name: str, extra_values: tuple[str, ...]) -> tuple[str, ...]:
        """``tuple(self.text(extra_name, v) for v in extra_values)``, cached as one entry."""
        key = (extra_name, extra_values)
        texts = self._texts.get(key)
        if texts is None:
            texts = self._texts[key] = tuple(self.text(extra_name, value) for value in extra_values)
        return texts


#: One sample: (sample name, value of the block's extra label or None, value).
Row = tuple[str, "str | None", float]

#: One slice's samples of one family: their rendered lines. A string is not
#: tracked by the garbage collector, so tens of thousands of cached blocks do
#: not slow every full collection down; the samples are parsed back from it.
Block = str


def format_value(value: float) -> str:
    """``floatToGoString(value)``, what both encoders write, with shortcuts for the usual values.

    Below 1e6 (where Go style would switch to an exponent) and above -inf,
    that is ``repr`` of the float: for a float ``v``, ``repr(v)``; for an
    int ``v`` above -10**15 (exact as a float, no exponent in its ``repr``),
    ``f"{v}.0"``; for an int from 1e6 up to 10**15 (exact as a float too), its
    digits as Go's mantissa and exponent (``1234500`` -> ``1.2345e+06``). The tests
    compare the two, also on random values (tests/property).
    """
    kind = type(value)
    if kind is float:
        if -math.inf < value < 1e6:  # nan fails both comparisons
            return repr(value)
    elif kind is int:
        if -10**15 < value < 10**6:
            return f"{value}.0"
        if 10**6 <= value < 10**15:
            return _go_exponent(value)  # type: ignore[arg-type]  # kind is int
    return floatToGoString(value)


def _go_exponent(value: int) -> str:
    """floatToGoString of an int in [1e6, 1e15): ``repr(float(value))`` is its digits and ``.0``."""
    digits = str(value)
    return f"{digits[0]}.{digits[1:]}".rstrip("0.") + f"e+{len(digits) - 1:02d}"


def sample_line(name: str, label_text: str, value: float) -> str:
    """One sample's line; ``label_text`` as :meth:`SliceLabels.text` renders it."""
    return f"{name}{label_text} {format_value(value)}\n"


@overload
def sample_lines(names: Iterable[str], label_texts: str | Iterable[str], values: Iterable[float],
                 native: bool = True) -> list[str]: ...


@overload
def sample_lines(names: Iterable[str], label_texts: str | Iterable[str], values: Iterable[float | None],
                 native: bool = True) -> list[str | None]: ...


def sample_lines(names: Iterable[str], label_texts: str | Iterable[str], values: Iterable[float | None],
                 native: bool = True) -> list[str] | list[str | None]:
    """``sample_line(name, label_text, value)`` of each triple, None for a None value, in one call.

    ``label_texts`` is one text per line, or one str for every line. The same text as
    :func:`sample_line`: natively when the extension is built (native/src/render.rs: Python's
    ``repr`` of a float within +-1e6, the digits of an int as here, anything else handed to
    :func:`format_value`), else :func:`format_value`'s shortcuts written out inline; either way a
    block of samples costs one Python call instead of two a sample. The tests compare both with
    ``floatToGoString`` on random values.
    """
    if native and _native_sample_lines is not None:
        return _native_sample_lines(names, label_texts, values, format_value)
    out: list[str | None] = []
    append = out.append
    for name, text, value in zip(names, repeat(label_texts) if isinstance(label_texts, str) else label_texts,
                                 values):
        kind = type(value)
        if kind is float:
            if _MINUS_INF < value < 1e6:  # type: ignore[operator]
                append(f"{name}{text} {value!r}\n")
                continue
        elif kind is int:
            if -10**15 < value < 10**6:  # type: ignore[operator]
                append(f"{name}{text} {value}.0\n")
                continue
        elif value is None:
            append(None)
            continue
        append(f"{name}{text} {format_value(value)}\n")  # type: ignore[arg-type]
    return out


_MINUS_INF = -math.inf


def make_block(labels: SliceLabels, rows: Sequence[Row], extra_label: str | None = None) -> Block:
    """The lines of ``rows`` of one slice; a row's extra value labels it ``extra_label``."""
    text = labels.text
    return "".join([sample_line(name, text(None if extra is None else extra_label, extra), value)
                    for name, extra, value in rows])


_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_ESCAPED = re.compile(r"\\(.)")


def _unescape(value: str) -> str:
    return _ESCAPED.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), value) if "\\" in value else value


def block_samples(text: str) -> list[Sample]:
    """The samples that lines of blocks describe (values as floats).

    Reads only what :func:`make_block` writes (``name{labels} value``, no
    timestamp); the tests compare it with prometheus_client's parser.
    """
    samples = []
    parsed: dict[str, dict[str, str]] = {}  # the label sets of a slice repeat from line to line
    for line in text.split("\n"):
        if not line:
            continue
        head, _, value = line.rpartition(" ")  # a label value may hold spaces, a value never does
        brace = head.find("{")
        if brace < 0:
            samples.append(Sample(head, {}, float(value)))
            continue
        inner = head[brace:]
        labels = parsed.get(inner)
        if labels is None:
            labels = parsed[inner] = {name: _unescape(v) for name, v in _LABEL.findall(inner)}
        samples.append(Sample(head[:brace], dict(labels), float(value)))
    return samples


class SliceFamily(Metric):
    """A metric family made of blocks (see the module docstring).

    ``add`` and ``add_block`` append a slice's samples; ``samples`` is built
    from the blocks on first access, and ``sample_text()`` is their lines, or
    None once samples were added some other way (then the library renders it).
    """

    _samples: list[Sample]
    _blocks: list[Block]
    _materialized: int
    _sample_count: int
    _foreign: bool

    def __init__(self, name: str, documentation: str, typ: str) -> None:
        super().__init__(name, documentation, typ)  # sets samples = [] through the setter below

    @classmethod
    def of(cls, spec: MetricSpec) -> SliceFamily:
        """An empty family for a per-slice metric of the table."""
        return cls(spec.name, spec.help, spec.type)

    @property
    def samples(self) -> list[Sample]:
        blocks = self._blocks
        if self._materialized < len(blocks):
            self._samples.extend(block_samples("".join(blocks[self._materialized:])))
            self._materialized = len(blocks)
        self._sample_count = len(self._samples)
        return self._samples

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        self._samples = list(value)
        self._blocks = []
        self._materialized = 0
        self._sample_count = len(self._samples)
        self._foreign = bool(self._samples)

    def add_sample(self, *args: Any, **kwargs: Any) -> None:
        self._foreign = True
        _ = self.samples  # materialize the blocks first so the order stays the order of addition
        super().add_sample(*args, **kwargs)

    def add_block(self, block: Block | None) -> None:
        if block:
            self._blocks.append(block)

    def add_blocks(self, blocks: Iterable[Block | None]) -> None:
        """``add_block`` of each of ``blocks``, in order (one call for a scrape's rows)."""
        self._blocks.extend(filter(None, blocks))

    def add(self, labels: SliceLabels, rows: Sequence[Row], extra_label: str | None = None) -> Block:
        block = make_block(labels, rows, extra_label)
        self.add_block(block)
        return block

    def sample_text(self) -> str | None:
        if self._foreign or len(self._samples) != self._sample_count:  # appended to behind our back
            return None
        return "".join(self._blocks)


def metric_family(spec: MetricSpec, dimensions: Sequence[str] = (),
                  value: float | None = None) -> CounterMetricFamily | GaugeMetricFamily:
    """A prometheus_client family for ``spec`` (a counter or gauge), with ``value`` as its one unlabelled sample.

    Without ``value`` the family is empty and labelled ``spec.label_names(dimensions)``.
    """
    if spec.type == "counter":
        kind: type[CounterMetricFamily] | type[GaugeMetricFamily] = CounterMetricFamily
    elif spec.type == "gauge":
        kind = GaugeMetricFamily
    else:
        raise ValueError(f"metric {spec.name}: metric_family builds counters and gauges, got type {spec.type!r}")
    if value is not None:
        if spec.labels:
            raise ValueError(f"metric {spec.name} has labels {list(spec.labels)}; a value needs an unlabelled one")
        return kind(spec.name, spec.help, value=value)
    return kind(spec.name, spec.help, labels=spec.label_names(dimensions))


class _Families:
    """A collector yielding the given families (to call an encoder on a part of a scrape)."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> list[Metric]:
        return self.families


def _fast_path(encoder: Callable[..., bytes]) -> bool:
    func = getattr(encoder, "func", encoder)
    keywords = getattr(encoder, "keywords", {}) or {}
    if func is not text_format.generate_latest and func is not openmetrics.generate_latest:
        return False
    return keywords.get("escaping", openmetrics.UNDERSCORES) in _FAST_ESCAPINGS


def _header_only(metric: Metric) -> Metric:
    header = Metric.__new__(Metric)
    header.name, header.documentation, header.type, header.unit = (metric.name, metric.documentation,
                                                                   metric.type, metric.unit)
    header.samples = []
    return header


def render(registry: Any, accept_header: str | None = None) -> tuple[bytes, str]:
    """``(body, content type)`` of one scrape of ``registry`` (see the module docstring)."""
    encoder, content_type = choose_encoder(accept_header or "")
    if not _fast_path(encoder):
        return encoder(registry), content_type
    trailer = encoder(_Families(())).decode()
    cut = len(trailer)
    out: list[str] = []
    for metric in registry.collect():
        text = metric.sample_text() if isinstance(metric, SliceFamily) else None
        if text is None:
            part = encoder(_Families((metric,))).decode()
            out.append(part[:len(part) - cut])
        else:
            header = encoder(_Families((_header_only(metric),))).decode()
            out.append(header[:len(header) - cut])
            out.append(text)
    out.append(trailer)
    return "".join(out).encode("utf-8"), content_type


def make_app(registry: Any, gzip_level: int = 6) -> Callable:
    """WSGI app serving :func:`render` for GET; anything else goes to prometheus_client's app.

    ``gzip_level`` defaults to zlib's 6 rather than the library's 9 (docs/metrics.md, "Scrape cost").
    """
    library_app = make_wsgi_app(registry)

    def app(environ: dict, start_response: Callable) -> list[bytes]:
        if (environ.get("REQUEST_METHOD") != "GET" or environ.get("PATH_INFO") == "/favicon.ico"
                or "name[]" in parse_qs(environ.get("QUERY_STRING", ""))):
            return library_app(environ, start_response)
        output, content_type = render(registry, environ.get("HTTP_ACCEPT"))
        headers = [("Content-Type", content_type)]
        if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
            output = gzip.compress(output, compresslevel=gzip_level)
            headers.append(("Content-Encoding", "gzip"))
        release_freed_memory()  # what the scrape freed (the windows' text, the plain body) goes back
        start_response("200 OK", headers)
        return [output]

    return app


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing (as prometheus_client's server)."""


def start_server(app: Callable, port: int, host: str = "127.0.0.1") -> tuple[Any, threading.Thread]:
    """Serve ``app`` from a daemon thread, one thread per request; returns ``(server, thread)``."""
    family, _type, _proto, _name, sockaddr = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]

    class Server(ThreadingWSGIServer):
        address_family = family

    server = make_server(str(sockaddr[0]), port, app, Server, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True, name="fleetmon-exporter-http")
    thread.start()
    return server, thread
