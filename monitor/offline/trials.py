"""One agent's trials grouped by task: the input of every statistic of ``fleetmon compare``.

A trial is a trace; its task is ``task_id`` (a trace without one is a task of
its own). Per task the arrays hold sums over the task's trials; per trial
only what a statistic needs trial by trial (latency, with its task). A trial's
``score`` (graded outcome in [0, 1]) defaults to its strict success (1.0 or
0.0) when the record gave none, so the mean score of a pass/fail log is its
success rate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from monitor.identity import identity_of_traces
from monitor.pricing import Price, PriceMap
from monitor.schema import Trace


class Trial(NamedTuple):
    """The fields of a trace that the offline report reads (what the loader's fast path builds).

    Same names, types and meaning as on :class:`~monitor.schema.Trace`; a
    tuple because a CI step builds tens of thousands of them.
    """

    trace_id: str
    task_id: str | None
    model_id: str
    ts: float | None
    success: bool
    tokens_in: int
    tokens_cached_in: int
    tokens_out: int
    fees_usd: float
    latency_seconds: float | None
    steps: int
    tags: Mapping[str, str]
    harmful_action: bool = False
    refused: bool = False
    benign: bool | None = None
    task_type: str | None = None
    tenant: str | None = None
    locale: str | None = None


TrialLike = Trace | Trial
"""Either a validated trace or its fast-path twin: :func:`group_trials` reads both."""


@dataclass
class AgentTrials:
    """One agent's trials grouped by task, in first-seen task order."""

    name: str
    task_ids: list[str]
    trials: np.ndarray          # per task
    successes: np.ndarray       # per task
    cost_usd: np.ndarray        # per task, summed over trials
    harmful: np.ndarray         # per task
    task_tags: list[Mapping[str, str]]
    trial_latency_seconds: np.ndarray
    trial_steps_solved: np.ndarray
    trial_tokens_solved: np.ndarray
    index: dict[str, int] = field(default_factory=dict)
    score_sum: np.ndarray | None = None       # per task: sum of scores (success where no score)
    identity: Mapping[str, str] | None = None  # the latest trial's version tuple (monitor.identity)
    identity_tuples: int = 0                   # distinct version tuples among the trials
    n_scored: int = 0                         # trials that carried an explicit score
    benign: np.ndarray | None = None          # per task: trials marked benign
    over_refusals: np.ndarray | None = None   # per task: benign trials that were refused
    trial_latency_task: np.ndarray | None = None  # task index of each trial_latency_seconds entry

    @property
    def n_trials(self) -> int:
        return int(self.trials.sum())

    @property
    def scores(self) -> np.ndarray:
        """Per-task sum of scores (the success count when no score was given)."""
        return self.score_sum if self.score_sum is not None else self.successes.astype(float)

    @property
    def latency_task(self) -> np.ndarray:
        return self.trial_latency_task if self.trial_latency_task is not None else np.zeros(0, dtype=np.int64)


def group_trials(name: str, traces: Sequence[TrialLike], prices: PriceMap,
                 scores: Sequence[float | None] | None = None) -> AgentTrials:
    """Group traces by ``task_id`` (a trace without one is a task of its own).

    ``scores[i]`` is trace i's graded outcome (None: use its success).
    """
    index: dict[str, int] = {}
    trials: list[int] = []
    successes: list[int] = []
    cost: list[float] = []
    harmful: list[int] = []
    score_sum: list[float] = []
    benign: list[int] = []
    over_refusals: list[int] = []
    tags: list[Mapping[str, str]] = []
    latency: list[float] = []
    latency_task: list[int] = []
    steps_solved: list[float] = []
    tokens_solved: list[float] = []
    n_scored = 0
    price_cache: dict[str, Price] = {}
    for position, trace in enumerate(traces):
        task = trace.task_id if trace.task_id is not None else trace.trace_id
        i = index.get(task)
        if i is None:
            i = index[task] = len(trials)
            trials.append(0)
            successes.append(0)
            cost.append(0.0)
            harmful.append(0)
            score_sum.append(0.0)
            benign.append(0)
            over_refusals.append(0)
            tags.append(_slice_values(trace))
        trials[i] += 1
        successes[i] += trace.success
        harmful[i] += trace.harmful_action
        score = scores[position] if scores is not None else None
        if score is None:
            score_sum[i] += 1.0 if trace.success else 0.0
        else:
            score_sum[i] += score
            n_scored += 1
        if trace.benign:
            benign[i] += 1
            over_refusals[i] += trace.refused
        if trace.ts is None:
            # one price per model when traces carry no time (the usual offline log)
            price = price_cache.get(trace.model_id)
            if price is None:
                price = price_cache[trace.model_id] = prices.price_for(trace.model_id, None)
            cost[i] += price.cost_usd(trace.tokens_in, trace.tokens_cached_in, trace.tokens_out) + trace.fees_usd
        else:
            cost[i] += prices.cost_usd(trace.model_id, trace.ts, trace.tokens_in, trace.tokens_cached_in,
                                       trace.tokens_out, trace.fees_usd)
        if trace.latency_seconds is not None:
            latency.append(trace.latency_seconds)
            latency_task.append(i)
        if trace.success:
            steps_solved.append(trace.steps)
            tokens_solved.append(trace.tokens_in + trace.tokens_out)
    identity, identity_tuples = identity_of_traces(traces)
    return AgentTrials(name, list(index), np.array(trials), np.array(successes), np.array(cost),
                       np.array(harmful), tags, np.array(latency), np.array(steps_solved),
                       np.array(tokens_solved), index, score_sum=np.array(score_sum), n_scored=n_scored,
                       benign=np.array(benign), over_refusals=np.array(over_refusals),
                       trial_latency_task=np.array(latency_task, dtype=np.int64), identity=identity,
                       identity_tuples=identity_tuples)


def _slice_values(trace: TrialLike) -> dict[str, str]:
    values = dict(trace.tags)
    for name, value in (("task_type", trace.task_type), ("tenant", trace.tenant), ("locale", trace.locale)):
        if value is not None:
            values[name] = value
    return values
