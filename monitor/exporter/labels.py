"""Slice labels: a slice id's dimensions as Prometheus label names and values, cached per slice.

A dimension becomes a valid label name (``[^A-Za-z0-9_]`` → ``_``, a leading digit gets ``_``),
and one that collides with a label the exporter sets itself (:data:`OWN_LABELS`) or starts with
``__`` gets a ``slice_`` prefix. A slice that lacks a dimension other slices have gets the empty
value (Prometheus: label absent). Two dimensions that map to the same label name are an error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from monitor.exporter.exposition import SliceLabels
from monitor.slices import DEFAULT_DIMENSIONS, parse_slice_id

#: Labels this exporter sets itself; a slice dimension of the same name is prefixed.
OWN_LABELS = frozenset(("window", "outcome", "type", "le", "quantile", "source", "dimension",
                        "job", "instance"))

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
        self._keys: dict[str, tuple[tuple[str, str], ...]] = {}
        self._names: tuple[str, ...] = ()
        self._labels: dict[str, SliceLabels] = {}

    def labels(self, groups: Iterable[Mapping[str, object]]) -> tuple[dict[str, SliceLabels], list[str]]:
        """Labels of every slice id in ``groups``, and the dimensions in label order."""
        keys = self._keys
        keys = self._keys = {sid: keys[sid] if sid in keys else parse_slice_id(sid)
                             for group in groups for sid in group}
        present = {dim for key in keys.values() for dim, _ in key}
        dims = [d for d in DEFAULT_DIMENSIONS if d in present]
        dims.extend(sorted(present - set(dims)))
        names = tuple(label_name(d) for d in dims)
        if len(set(names)) != len(names):
            raise ValueError(f"slice dimensions {dims} map to clashing Prometheus labels {list(names)}")
        cached = self._labels if names == self._names else {}
        self._names = names
        self._labels = {sid: cached[sid] if sid in cached else SliceLabels(names, _label_values(key, dims))
                        for sid, key in keys.items()}
        return self._labels, dims


def _label_values(key: Sequence[tuple[str, str]], dims: Sequence[str]) -> list[str]:
    found = dict(key)
    return [found.get(d, "") for d in dims]
