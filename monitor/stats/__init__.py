"""Pure statistics core: rate intervals, pass@k, paired tests, bootstrap,
multiple-testing control and Pareto comparisons.

Plain typed Python over numpy and scipy.special; no I/O, no clocks, no
streaming or storage imports. Conventions shared by every module: intervals
are two-sided; an empty input gives nan point estimates (a rate interval for
n = 0 is (0.0, 1.0)); errors name the argument, the value and what is allowed.
"""

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
