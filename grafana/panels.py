"""Panel, query and variable builders for grafana/build.py, on grafana-foundation-sdk's builders.

Every panel and query reads the Prometheus datasource picked by the ``datasource``
variable (default uid ``DATASOURCE_UID``); slice variables are multi-value with
``.*`` as "All", so ``SLICE_SELECTOR`` matches with ``=~``. Every panel gets an
explicit grid position (the SDK's auto-layout only fills a panel at ``(0, 0)``) and
:func:`dashboard` numbers the panels in order, so the output is deterministic.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.builders import prometheus, statetimeline, timeseries, xychart
from grafana_foundation_sdk.builders import stat as stat_panel
from grafana_foundation_sdk.builders import table as table_panel
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.variants import Dataquery
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as models
from grafana_foundation_sdk.models import prometheus as prometheus_models
from grafana_foundation_sdk.models import xychart as xychart_models

DATASOURCE_UID = "fleetmon-prometheus"
DS = models.DataSourceRef(type_val="prometheus", uid="${datasource}")
SLICE_DIMENSIONS = ("release", "arm", "task_type", "tenant", "locale")
#: The default slice groupings' ``grouping`` label values (monitor/groupings.py default_groupings; a unit
#: test keeps them equal). Each trace is in one row of every grouping: a panel reads one grouping.
GROUPINGS = ("", "task_type", "tenant", "locale", "task_type,tenant", "task_type,locale")
#: Selects the rows of the grouping picked by the ``grouping`` variable.
GROUPING_SELECTOR = 'grouping=~"$grouping"'
SLICE_SELECTOR = ", ".join([*(f'{d}=~"${d}"' for d in SLICE_DIMENSIONS), GROUPING_SELECTOR])
#: The release × arm grouping (its label is absent): sums by release or arm over it count each trace once.
BASE = 'grouping=""'
#: (x, y, w, h) on Grafana's 24-column grid.
Grid = tuple[int, int, int, int]
#: (PromQL, legend format) of one query.
Query = tuple[str, str]
#: What :func:`dashboard` lays out: the panel builders used here and rows.
PanelBuilder = (timeseries.Panel | stat_panel.Panel | table_panel.Panel | xychart.Panel | statetimeline.Panel
                | dashboard_builders.Row)
#: A Prometheus annotation: the SDK's builder, plus the Prometheus fields it has no setter for
#: (``titleFormat``, ``textFormat``, ``tagKeys``, ``step``), merged into its JSON.
Annotation = tuple[dashboard_builders.AnnotationQuery, dict[str, str]]

_DASHED = [models.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [6, 4]}),
           models.DynamicConfigValue(id_val="custom.lineWidth", value=1),
           models.DynamicConfigValue(id_val="custom.fillOpacity", value=8)]


def query(expr: str, legend: str = "", ref: str = "A", *, instant: bool = False,
          table: bool = False) -> prometheus.Dataquery:
    out = prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DS)
    if instant:
        out.instant()
    if table:
        out.format(prometheus_models.PromQueryFormat.TABLE)
    return out


def _queries(exprs: Sequence[Query], **options: bool) -> list[Builder[Dataquery]]:
    return [query(expr, legend, chr(ord("A") + i), **options) for i, (expr, legend) in enumerate(exprs)]


def grid_pos(grid: Grid) -> models.GridPos:
    x, y, w, h = grid
    return models.GridPos(x=x, y=y, w=w, h=h)


def timeseries_panel(title: str, exprs: Sequence[Query], grid: Grid, unit: str, description: str, *,
                     minimum: float | None = None, maximum: float | None = None, bounds_regex: str | None = None,
                     log_scale: bool = False) -> timeseries.Panel:
    """A time-series panel; series whose name matches ``bounds_regex`` are drawn as dashed bounds."""
    panel = (timeseries.Panel().title(title).description(description).datasource(DS).grid_pos(grid_pos(grid))
             .targets(_queries(exprs)).unit(unit).line_width(2).fill_opacity(0)
             .show_points(common.VisibilityMode.NEVER)
             .legend(common_builders.VizLegendOptions().display_mode(common.LegendDisplayMode.TABLE)
                     .placement(common.LegendPlacement.BOTTOM).show_legend(True).calcs(["lastNotNull"]))
             .tooltip(common_builders.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI)
                      .sort(common.SortOrder.DESCENDING)))
    if minimum is not None:
        panel.min(minimum)
    if maximum is not None:
        panel.max(maximum)
    if bounds_regex:
        panel.override_by_regexp(bounds_regex, _DASHED)
    if log_scale:
        panel.scale_distribution(common_builders.ScaleDistributionConfig().type(common.ScaleDistribution.LOG)
                                 .log(10))
    return panel


def right_axis(panel: timeseries.Panel, ref: str, unit: str) -> timeseries.Panel:
    """Draw query ``ref`` of ``panel`` on a right-hand axis with its own unit."""
    return panel.override_by_query(ref, [models.DynamicConfigValue(id_val="unit", value=unit),
                                         models.DynamicConfigValue(id_val="custom.axisPlacement", value="right")])


def stat(title: str, expr: str, grid: Grid, unit: str, description: str,
         thresholds: Sequence[tuple[float | None, str]] | None = None) -> stat_panel.Panel:
    steps = [models.Threshold(value=v, color=c) for v, c in (thresholds or [(None, "green")])]
    return (stat_panel.Panel().title(title).description(description).datasource(DS).grid_pos(grid_pos(grid))
            .with_target(query(expr, instant=True)).unit(unit)
            .thresholds(dashboard_builders.ThresholdsConfig().mode(models.ThresholdsMode.ABSOLUTE).steps(steps))
            .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False))
            .color_mode(common.BigValueColorMode.VALUE).graph_mode(common.BigValueGraphMode.AREA)
            .text_mode(common.BigValueTextMode.AUTO))


def _merged(rename: dict[str, str]) -> list[models.DataTransformerConfig]:
    """Instant table queries joined on their labels, the time and scrape labels dropped, values renamed."""
    return [models.DataTransformerConfig(id_val="merge", options={}),
            models.DataTransformerConfig(id_val="organize", options={
                "excludeByName": {"Time": True, "job": True, "instance": True}, "renameByName": rename})]


def table(title: str, exprs: Sequence[Query], grid: Grid, description: str,
          rename: dict[str, str]) -> table_panel.Panel:
    """Instant queries joined on their labels into one table (one row per label set)."""
    return (table_panel.Panel().title(title).description(description).datasource(DS).grid_pos(grid_pos(grid))
            .targets(_queries(exprs, instant=True, table=True)).transformations(_merged(rename)).show_header(True))


def scatter(title: str, description: str, grid: Grid, x: tuple[str, str, str],
            y: tuple[str, str, str]) -> xychart.Panel:
    """An XY chart of one point per label set: ``x`` and ``y`` are (PromQL, field name, unit), instant."""
    fields = {"Value #A": x[1], "Value #B": y[1]}
    size = common_builders.ScaleDimensionConfig().fixed(10).min(10).max(10)
    return (xychart.Panel().title(title).description(description).datasource(DS).grid_pos(grid_pos(grid))
            .targets([query(x[0], "{{release}}", "A", instant=True, table=True),
                      query(y[0], "{{release}}", "B", instant=True, table=True)])
            .transformations(_merged(fields)).show(xychart_models.ScatterShow.POINTS).point_size(size)
            .override_by_name(x[1], [models.DynamicConfigValue(id_val="unit", value=x[2])])
            .override_by_name(y[1], [models.DynamicConfigValue(id_val="unit", value=y[2])])
            .series_mapping(xychart_models.SeriesMapping.MANUAL)
            .series([xychart.ScatterSeriesConfig().name("releases").x(x[1]).y(y[1]).point_size(size)])
            .legend(common_builders.VizLegendOptions().show_legend(True).display_mode(common.LegendDisplayMode.LIST)
                    .placement(common.LegendPlacement.BOTTOM))
            .tooltip(common_builders.VizTooltipOptions().mode(common.TooltipDisplayMode.SINGLE)))


def state_timeline(title: str, expr: str, legend: str, grid: Grid, description: str,
                   states: Sequence[tuple[str, str]]) -> statetimeline.Panel:
    """A state timeline of ``expr``, whose value is ``i + 1`` for ``states[i]`` = (name, color)."""
    mapping = models.ValueMap(options={str(i + 1): models.ValueMappingResult(text=name, color=color, index=i)
                                       for i, (name, color) in enumerate(states)})
    return (statetimeline.Panel().title(title).description(description).datasource(DS).grid_pos(grid_pos(grid))
            .with_target(query(expr, legend)).mappings([mapping]).show_value(common.VisibilityMode.AUTO)
            .merge_values(True).fill_opacity(80).line_width(0)
            .legend(common_builders.VizLegendOptions().show_legend(True).display_mode(common.LegendDisplayMode.LIST)
                    .placement(common.LegendPlacement.BOTTOM)))


def annotation(name: str, expr: str, color: str, *, title: str, text: str, tags: str) -> Annotation:
    """A Prometheus annotation: an event wherever ``expr`` returns a series (adjacent steps merge into a region)."""
    builder = dashboard_builders.AnnotationQuery().name(name).datasource(DS).expr(expr).enable(True).icon_color(color)
    return builder, {"titleFormat": title, "textFormat": text, "tagKeys": tags, "step": "1m"}


def _by_side(expr: str, side: str) -> str:
    """A per-release expression relabelled as the comparison's ``side`` (baseline or candidate)."""
    return f'max by ({side}) (label_join({expr}, "{side}", "", "release"))'


def per_comparison(pairs: str, expr: str, op: str) -> str:
    """A per-release ``expr`` of the candidate ``op`` that of the baseline, one series per (baseline,
    candidate) of ``pairs`` (label_join copies the label: label_replace's ``$1`` would read as a variable)."""
    return (f"(0 * {pairs} + on (candidate) group_left () {_by_side(expr, 'candidate')}) "
            f"{op} on (baseline) group_left () {_by_side(expr, 'baseline')}")


def row(title: str, y: int) -> dashboard_builders.Row:
    return dashboard_builders.Row(title).collapsed(False).grid_pos(grid_pos((0, y, 24, 1)))


def datasource_variable() -> dashboard_builders.DatasourceVariable:
    return (dashboard_builders.DatasourceVariable("datasource").label("Prometheus").type("prometheus")
            .current(models.VariableOption(text=DATASOURCE_UID, value=DATASOURCE_UID)))


def label_variable(name: str, metric: str = "fleetmon_traces_total") -> dashboard_builders.QueryVariable:
    """A multi-value ``label_values(metric, name)`` variable, All = ``.*``."""
    return (dashboard_builders.QueryVariable(name).label(name).datasource(DS)
            .query(f"label_values({metric}, {name})").multi(True).include_all(True).all_value(".*")
            .current(models.VariableOption(text=["All"], value=["$__all"]))
            .refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(models.VariableSort.ALPHABETICAL_ASC))


#: The ``grouping`` variable's value for release × arm: a regex that matches only the empty (absent) label.
BASE_GROUPING_VALUE = "()"


def grouping_variable() -> dashboard_builders.CustomVariable:
    """The slice grouping a dashboard's per-slice panels read (single value; default release × arm).

    Grouping names hold commas, escaped in the custom variable's query; an operator's own grouping is
    picked with ``?var-grouping=<name>`` or added to :data:`GROUPINGS`."""
    def text(name: str) -> str:
        return "release × arm" if not name else "release × arm × " + name.replace(",", " × ")

    def value(name: str) -> str:
        return name or BASE_GROUPING_VALUE

    options = [models.VariableOption(text=text(g), value=value(g), selected=not g) for g in GROUPINGS]
    query = ",".join(f"{text(g)} : {value(g)}".replace(",", "\\,") if "," in g else f"{text(g)} : {value(g)}"
                     for g in GROUPINGS)
    return (dashboard_builders.CustomVariable("grouping").label("grouping").values(query).multi(False)
            .include_all(False).current(models.VariableOption(text=text(""), value=BASE_GROUPING_VALUE))
            .options(options))


def window_variable() -> dashboard_builders.CustomVariable:
    options = [models.VariableOption(text=w, value=w, selected=w == "1h") for w in ("5m", "1h")]
    return (dashboard_builders.CustomVariable("window").label("window").values("5m,1h").multi(False)
            .include_all(False).current(models.VariableOption(text="1h", value="1h")).options(options))


def dashboard(uid: str, title: str, description: str, panels: Sequence[PanelBuilder],
              variables: Sequence[Builder[models.VariableModel]], tags: Sequence[str],
              annotations: Sequence[Annotation] = ()) -> dict[str, Any]:
    """The dashboard's JSON model (plain dicts): panels and rows in order, numbered from 1; annotations in order."""
    board = (dashboard_builders.Dashboard(title).uid(uid).description(description).tags(["fleetmon", *tags])
             .timezone("utc").editable().tooltip(models.DashboardCursorSync.CROSSHAIR).refresh("30s")
             .time("now-6h", "now").version(1).variables([datasource_variable(), *variables])
             .link(dashboard_builders.DashboardLink("fleetmon").type(models.DashboardLinkType.DASHBOARDS)
                   .tags(["fleetmon"]).as_dropdown(True)))
    for i, panel in enumerate(panels, 1):
        if isinstance(panel, dashboard_builders.Row):
            board.with_row(panel.id(i))
        else:
            board.with_panel(panel.id(i))
    for builder, _fields in annotations:
        board.annotation(builder)
    model: dict[str, Any] = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    for entry, (_builder, fields) in zip(model.get("annotations", {}).get("list", []), annotations, strict=True):
        entry.update(fields)
    return model
