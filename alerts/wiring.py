"""Building the alert engine's parts from a :class:`~monitor.config.Config` (pure)."""

from __future__ import annotations

from typing import TextIO

from alerts.decide import Floors, Policy
from alerts.engine import EngineConfig
from alerts.lifecycle import LifecycleConfig
from alerts.notifiers import AlertmanagerNotifier, FanOut, Notifier, StdoutNotifier, WebhookNotifier, ends_after
from monitor.config import Config
from monitor.worker_settings import pair_caps


def engine_config(config: Config) -> EngineConfig:
    a = config.alerts
    policy = Policy(alpha=a.alpha,
                    floors=Floors(success_points=a.success_floor, cost_relative=a.cost_floor,
                                  latency_relative=a.latency_floor),
                    harmful_threshold=a.harmful_threshold if a.harmful_threshold >= 0 else None,
                    over_refusal_threshold=a.over_refusal_threshold if a.over_refusal_threshold >= 0 else None,
                    caps=pair_caps(config))
    # The recovery detector's ARL is counted in evaluations: one false resolution per
    # 1 / false_resolutions_per_day days at one evaluation per `interval`.
    evaluations_per_day = 86_400.0 / config.seconds("alerts", "interval")
    lifecycle = LifecycleConfig(for_seconds=config.seconds("alerts", "hold"),
                                recovery_arl=evaluations_per_day / a.false_resolutions_per_day,
                                rearm_alpha=a.rearm_alpha,
                                renotify_seconds=config.seconds("alerts", "renotify"),
                                recovery_min_pairs=a.recovery_min_pairs,
                                runbook_base=a.runbook_base_url)
    return EngineConfig(policy=policy, lifecycle=lifecycle,
                        canary_lookback_seconds=config.seconds("alerts", "canary_lookback"),
                        canary_block_seconds=config.seconds("alerts", "canary_block"),
                        restore_hold_seconds=config.seconds("alerts", "restore_hold"),
                        environment_arl_hours=8760.0 / a.environment_false_pages_per_year)


def notifier(config: Config, stdout: TextIO | None = None, to_stdout: bool = True) -> Notifier:
    """Stdout JSON lines (unless ``to_stdout`` is False) plus every configured destination."""
    parts: list[Notifier] = [StdoutNotifier(stdout)] if to_stdout else []
    n = config.notifiers
    if n.alertmanager_url:
        # Re-posted every evaluation; endsAt lead: 4 intervals, at least 3 min (docs/alerts.md "Delivery").
        parts.append(AlertmanagerNotifier(n.alertmanager_url,
                                          ends_after_seconds=ends_after(config.seconds("alerts", "interval"))))
    if n.webhook_url:
        parts.append(WebhookNotifier(n.webhook_url, n.webhook_secret))
    return FanOut(parts)
