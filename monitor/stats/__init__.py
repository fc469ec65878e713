"""Pure statistics core: rate intervals, pass@k, paired tests, bootstrap,
multiple-testing control and Pareto comparisons.

Plain typed Python over numpy and scipy.special; no I/O, no clocks, no
streaming or storage imports. Conventions shared by every module: intervals
are two-sided; an empty input gives nan point estimates (a rate interval for
n = 0 is (0.0, 1.0)); errors name the argument, the value and what is allowed.
The package's names are imported on first use, so a process that needs only the rate
intervals (the exporter, through ``monitor.aggregate``) does not load numpy.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from monitor.stats.bootstrap import (
        BootstrapResult,
        bootstrap_mean_ci,
        bootstrap_ratio_ci,
        paired_bootstrap,
    )
    from monitor.stats.intervals import (
        METHOD_CLOPPER_PEARSON,
        METHOD_WILSON,
        RateEstimate,
        clopper_pearson_interval,
        estimate_rate,
        rate_interval,
        wilson_interval,
    )
    from monitor.stats.multiple import benjamini_hochberg, e_benjamini_hochberg, holm
    from monitor.stats.paired import McNemarResult, mcnemar, mcnemar_from_outcomes
    from monitor.stats.pareto import (
        Point,
        dominates,
        iso_cost_statement,
        iso_success_statement,
        pareto_frontier,
        pareto_verdict,
    )
    from monitor.stats.passk import mean_pass_at_k, mean_pass_hat_k, pass_at_k, pass_hat_k

#: Each name's module: imported on first use (``monitor.stats.intervals``, which the exporter and the
#: aggregate need, imports no numpy; the rest do, and a process that never uses them never loads it).
_LAZY = {
    "BootstrapResult": "monitor.stats.bootstrap",
    "METHOD_CLOPPER_PEARSON": "monitor.stats.intervals",
    "METHOD_WILSON": "monitor.stats.intervals",
    "McNemarResult": "monitor.stats.paired",
    "Point": "monitor.stats.pareto",
    "RateEstimate": "monitor.stats.intervals",
    "benjamini_hochberg": "monitor.stats.multiple",
    "bootstrap_mean_ci": "monitor.stats.bootstrap",
    "bootstrap_ratio_ci": "monitor.stats.bootstrap",
    "clopper_pearson_interval": "monitor.stats.intervals",
    "dominates": "monitor.stats.pareto",
    "e_benjamini_hochberg": "monitor.stats.multiple",
    "estimate_rate": "monitor.stats.intervals",
    "holm": "monitor.stats.multiple",
    "iso_cost_statement": "monitor.stats.pareto",
    "iso_success_statement": "monitor.stats.pareto",
    "mcnemar": "monitor.stats.paired",
    "mcnemar_from_outcomes": "monitor.stats.paired",
    "mean_pass_at_k": "monitor.stats.passk",
    "mean_pass_hat_k": "monitor.stats.passk",
    "paired_bootstrap": "monitor.stats.bootstrap",
    "pareto_frontier": "monitor.stats.pareto",
    "pareto_verdict": "monitor.stats.pareto",
    "pass_at_k": "monitor.stats.passk",
    "pass_hat_k": "monitor.stats.passk",
    "rate_interval": "monitor.stats.intervals",
    "wilson_interval": "monitor.stats.intervals",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'monitor.stats' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "METHOD_CLOPPER_PEARSON",
    "METHOD_WILSON",
    "BootstrapResult",
    "McNemarResult",
    "Point",
    "RateEstimate",
    "benjamini_hochberg",
    "bootstrap_mean_ci",
    "bootstrap_ratio_ci",
    "clopper_pearson_interval",
    "dominates",
    "e_benjamini_hochberg",
    "estimate_rate",
    "holm",
    "iso_cost_statement",
    "iso_success_statement",
    "mcnemar",
    "mcnemar_from_outcomes",
    "mean_pass_at_k",
    "mean_pass_hat_k",
    "paired_bootstrap",
    "pareto_frontier",
    "pareto_verdict",
    "pass_at_k",
    "pass_hat_k",
    "rate_interval",
    "wilson_interval",
]
