"""What a changed row renders: a slice's totals blocks and a (window, slice)'s gauge blocks.

:class:`RowRenderer` writes the blocks :class:`~monitor.exporter.collector.FleetCollector` caches
per row (:class:`TotalsEntry`, :class:`WindowEntry`) and reuses while the reader returns the very
same aggregate and labels. A row's samples are written in one
:func:`~monitor.exporter.exposition.sample_lines` call (natively when the extension is built) and
cut into its families' blocks; the text is what prometheus_client writes for the same samples
(docs/metrics.md, "Scrape cost").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import repeat

from prometheus_client.utils import floatToGoString

from monitor.aggregate import Aggregate
from monitor.exporter import families as table
from monitor.exporter.exposition import Block, SliceLabels, sample_line, sample_lines
from monitor.exporter.figures import ModelTokens, histogram_counts, token_sums, window_figures
from monitor.pricing import Price, PriceMap
from monitor.schema import OUTCOMES

OUTCOME_VALUES = (*OUTCOMES, "none")  # the outcome label of fleetmon_traces_total, "none": no outcome field
TOKEN_TYPES = ("input", "cached_input", "output")
#: The fields behind fleetmon_traces_total's outcomes, then behind the SIMPLE_COUNTERS.
_COUNTER_FIELDS = (*("outcome:" + outcome for outcome in OUTCOME_VALUES),
                   *(field for _spec, field in table.SIMPLE_COUNTERS))
_ZEROS = (0,) * len(_COUNTER_FIELDS)
#: The sample name of each line of a (window, slice)'s blocks: the window's traces, then the HEALTH_GAUGES.
_WINDOW_NAMES = (table.WINDOW_TRACES.sample_name, *(spec.sample_name for spec in table.HEALTH_GAUGES))


# The two entries are not frozen: one is made per changed row per scrape, and a frozen dataclass's
# __init__ (object.__setattr__ per field) costs 3-4 times as much; nothing changes an entry once made.
@dataclass(slots=True)
class TotalsEntry:
    """A slice's rendered totals blocks, valid while the reader returns this very aggregate and labels,
    and its tokens per model and fees (priced at each scrape's ``now``)."""

    aggregate: Aggregate
    labels: SliceLabels
    blocks: list[Block]
    models: ModelTokens
    fees_usd: float


@dataclass(slots=True)
class WindowEntry:
    """A (window, slice)'s rendered gauge blocks, valid for this aggregate, first minute and labels
    (``label_text``: the labels' text with the window's)."""

    aggregate: Aggregate
    first_start: int
    labels: SliceLabels
    label_text: str
    blocks: list[Block | None]


class RowRenderer:
    """The blocks of changed rows, for ``prices`` and the latency histogram's sorted upper bounds."""

    def __init__(self, prices: PriceMap, latency_buckets: Sequence[float]) -> None:
        self.prices = prices
        self.latency_buckets = tuple(latency_buckets)
        self._bucket_names = (*(floatToGoString(b) for b in self.latency_buckets), "+Inf")
        # as HistogramMetricFamily: no _count / _sum with negative buckets
        self._histogram_totals = float(self._bucket_names[0]) >= 0
        latency = table.LATENCY.name
        #: The sample name of each line of a slice's totals blocks, in the order totals() renders them.
        self._totals_names = (*repeat(table.TRACES.sample_name, len(OUTCOME_VALUES)),
                              *(spec.sample_name for spec, _field in table.SIMPLE_COUNTERS),
                              *repeat(table.TOKENS.sample_name, len(TOKEN_TYPES)),
                              *repeat(latency + "_bucket", len(self._bucket_names)),
                              *((latency + "_count", latency + "_sum") if self._histogram_totals else ()))

    def totals(self, agg: Aggregate, lv: SliceLabels) -> TotalsEntry:
        """The blocks that depend on the totals alone (not on ``now``), in family order (traces by
        outcome, the SIMPLE_COUNTERS, tokens, the latency histogram): the samples of every block
        rendered in one :func:`sample_lines` call, then cut into the blocks."""
        get = agg.counts.get
        models, (tokens_in, tokens_cached_in, tokens_out) = token_sums(agg)
        count = int(get("latency_count", 0))
        plain = lv.text()
        simple = len(table.SIMPLE_COUNTERS)
        values: list[float] = [*map(get, _COUNTER_FIELDS, _ZEROS),  # counts.get(field, 0) of each
                               tokens_in - tokens_cached_in, tokens_cached_in, tokens_out,
                               *map(min, histogram_counts(agg.latency, self.latency_buckets), repeat(count)), count]
        texts = [*lv.texts("outcome", OUTCOME_VALUES), *repeat(plain, simple), *lv.texts("type", TOKEN_TYPES),
                 *lv.texts("le", self._bucket_names)]
        if self._histogram_totals:
            values.append(count)
            values.append(float(get("latency_sum_seconds", 0.0)))
            texts.append(plain)
            texts.append(plain)
        lines = sample_lines(self._totals_names, texts, values)
        outcomes, tokens = len(OUTCOME_VALUES), len(OUTCOME_VALUES) + simple
        blocks = ["".join(lines[:outcomes]), *lines[outcomes:tokens], "".join(lines[tokens:tokens + 3]),
                  "".join(lines[tokens + 3:])]
        return TotalsEntry(agg, lv, blocks, models, get("fees_usd", 0.0))

    def window(self, agg: Aggregate, first_start: int, lv: SliceLabels, window: str,
               price_of: Callable[[str], Price]) -> WindowEntry:
        """``fleetmon_window_traces`` then one block (or None) per ``HEALTH_GAUGES`` family of the
        window named ``window`` starting at ``first_start`` (``price_of``: ``prices.price_for(model,
        first_start)``, a memo of it)."""
        n = agg.traces
        label_text = lv.text("window", window)
        if n == 0:
            blocks: list[Block | None] = [sample_line(table.WINDOW_TRACES.sample_name, label_text, n),
                                          *[None] * len(table.HEALTH_GAUGES)]
        else:
            blocks = sample_lines(_WINDOW_NAMES, label_text,
                                  [n, *window_figures(agg, self.prices, first_start, price_of)])
        return WindowEntry(agg, first_start, lv, label_text, blocks)
