"""Slice labels: a slice id's dimensions as Prometheus label names and values, cached per slice.

A dimension becomes a valid label name (``[^A-Za-z0-9_]`` → ``_``, a leading digit gets ``_``),
and one that collides with a label the exporter sets itself (:data:`OWN_LABELS`) or starts with
``__`` gets a ``slice_`` prefix. A slice that lacks a dimension other slices have gets the empty
value (Prometheus: label absent). Two dimensions that map to the same label name are an error.
Every slice also gets the ``grouping`` label (:data:`GROUPING_LABEL`), last: each trace is in one
row of every grouping, so a query sums the rows of one grouping.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from prometheus_client.metrics_core import Metric

from monitor.exporter import families as table
from monitor.exporter.exposition import SliceLabels, metric_family
from monitor.groupings import FOLDED_COUNTER_PREFIX, grouping_name
from monitor.slices import DEFAULT_DIMENSIONS, parse_slice_id

#: The label naming a slice's grouping (monitor/groupings.py): its dimensions other than release and arm
#: joined with ","; empty (absent) for release × arm, so ``sum by (release) (m{grouping=""})`` counts a trace once.
GROUPING_LABEL = "grouping"

#: Labels this exporter sets itself; a slice dimension of the same name is prefixed.
OWN_LABELS = frozenset(("window", "outcome", "type", "le", "quantile", "source", "dimension",
                        "job", "instance", GROUPING_LABEL))

_LABEL_BAD = re.compile(r"[^A-Za-z0-9_]")


def label_name(dimension: str) -> str:
    """The Prometheus label for a slice dimension (see the module docstring)."""
    name = _LABEL_BAD.sub("_", dimension) or "_"
    if name[0].isdigit():
        name = "_" + name
    if name in OWN_LABELS or name.startswith("__"):
        name = "slice_" + name.lstrip("_")
    return name


class SliceLabeller:
    """Per slice id its :class:`SliceLabels`, reused from scrape to scrape.

    A slice's parsed id is kept while the slice is seen, and its labels while
    the set of label names (the union of every seen slice's dimensions:
    the default dimensions first, in their order, then the others sorted)
    stays the same, so an unchanged slice hands out the very same object
    (the collector's block caches compare it by identity).
    """

    def __init__(self) -> None:
        #: The groupings of the slices of the last call, sorted by name.
        self.grouping_names: tuple[str, ...] = ()
        self._keys: dict[str, tuple[tuple[str, str], ...]] = {}
        self._names: tuple[str, ...] = ()
        self._labels: dict[str, SliceLabels] = {}

    def labels(self, groups: Iterable[Mapping[str, object]]) -> tuple[dict[str, SliceLabels], list[str]]:
        """Labels of every slice id in ``groups``, and the dimensions in label order."""
        keys = self._keys
        keys = self._keys = {sid: keys[sid] if sid in keys else parse_slice_id(sid)
                             for group in groups for sid in group}
        present = {dim for key in keys.values() for dim, _ in key}
        self.grouping_names = tuple(sorted({grouping_name(key) for key in keys.values()}))
        dims = [d for d in DEFAULT_DIMENSIONS if d in present]
        dims.extend(sorted(present - set(dims)))
        names = (*(label_name(d) for d in dims), GROUPING_LABEL)
        if len(set(names)) != len(names):
            raise ValueError(f"slice dimensions {dims} map to clashing Prometheus labels {list(names)}")
        cached = self._labels if names == self._names else {}
        self._names = names
        self._labels = {sid: cached[sid] if sid in cached else SliceLabels(names, _label_values(key, dims))
                        for sid, key in keys.items()}
        return self._labels, dims


def _label_values(key: Sequence[tuple[str, str]], dims: Sequence[str]) -> list[str]:
    found = dict(key)
    return [*(found.get(d, "") for d in dims), grouping_name(key)]


def grouping_folded(counters: Mapping[str, float], groupings: Iterable[str]) -> Metric:
    """``fleetmon_grouping_folded_total`` per grouping: the store's ``grouping_folded:<name>`` counters,
    0 for every grouping of the exported slices other than release × arm (so rate() has a series first)."""
    family = metric_family(table.GROUPING_FOLDED)
    counts = {name: 0.0 for name in groupings if name}
    for name, value in counters.items():
        if name.startswith(FOLDED_COUNTER_PREFIX):
            counts[name[len(FOLDED_COUNTER_PREFIX):]] = value
    for name, value in sorted(counts.items()):
        family.add_metric([name], value)
    return family
