"""The metric table is the one list of exported metrics: the docs' tables list exactly it."""

from __future__ import annotations

import re

import pytest

from monitor.exporter.families import COMPARISON_DISCORDANT, METRICS, SLICE, MetricSpec
from tests.support.paths import ROOT

_CODE = re.compile(r"`([^`]*)`")


def documented(markdown: str) -> dict[str, tuple[str, frozenset[str]]]:
    """Per metric named in a table with a ``metric`` column: its type and labels ("slice" = the slice labels).

    A row may name several metrics (``a``, ``b``); a metric named twice is an error.
    """
    rows: dict[str, tuple[str, frozenset[str]]] = {}
    header: list[str] | None = None
    for line in markdown.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if header is None:
            header = cells
            continue
        if set("".join(cells)) <= set("-: ") or "metric" not in header:
            continue
        row = dict(zip(header, cells))
        labels = frozenset(SLICE if part.strip() == "slice" else part.strip().strip("`")
                           for part in row.get("labels", "").split(",") if part.strip())
        for name in _CODE.findall(row["metric"]):
            assert name not in rows, f"{name} is documented twice"
            rows[name] = (row.get("type", ""), labels)
    return rows


def section(markdown: str, title: str) -> str:
    start = markdown.index(title)
    end = markdown.find("\n## ", start + len(title))
    return markdown[start:end if end >= 0 else len(markdown)]


def test_the_table_names_every_metric_once_with_a_known_type():
    names = [spec.sample_name for spec in METRICS]
    assert len(names) == len(set(names))
    assert all(name.startswith("fleetmon_") for name in names)
    assert all(spec.help and spec.type in ("counter", "gauge", "histogram") for spec in METRICS)
    with pytest.raises(ValueError, match="type must be one of"):
        MetricSpec("fleetmon_x", "summary", "x")


@pytest.mark.parametrize("document", ["docs/metrics.md", "README.md"])
def test_the_docs_list_exactly_the_metrics_of_the_table(document):
    text = (ROOT / document).read_text(encoding="utf-8")
    if document == "README.md":
        text = section(text, "## Metrics, dashboards and rules")
    docs = documented(text)
    table = {spec.sample_name: (spec.type, frozenset(spec.labels)) for spec in METRICS}
    assert sorted(set(table) - set(docs)) == [], f"in the metric table but not in {document}"
    assert sorted(set(docs) - set(table)) == [], f"in {document} but not in the metric table"
    wrong = {name: (docs[name], table[name]) for name in table if docs[name] != table[name]}
    assert wrong == {}, f"{document} (type, labels) differ from the table's: {{name: (doc, table)}}"


def test_label_names_expand_the_slice_marker():
    assert COMPARISON_DISCORDANT.label_names(["task_type", "tenant"]) == [
        "baseline", "candidate", "arm", "metric", "task_type", "tenant", "kind"]
    assert COMPARISON_DISCORDANT.per_slice and not MetricSpec("fleetmon_x", "gauge", "x").per_slice
