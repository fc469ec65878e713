"""The alert engine's last findings as it saves them in the store, and their reader for the exporter (pure).

The engine puts a snapshot (``{"ts": ..., "findings": [...]}``) under :data:`FINDINGS_STATE_NAME`
after each evaluation; the exporter serves it as the ``fleetmon_comparison_*`` families. The
reader lives apart from :mod:`alerts.engine` so the exporter process does not load the engine
(and numpy with it) to read a saved document.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from monitor.store.base import Store

FINDINGS_STATE_NAME = "findings"


def from_store(store: Store, max_age_seconds: float = 300.0, *,
               clock: Callable[[], float]) -> Callable[[], list[dict[str, Any]]]:
    """Finding snapshots the engine last saved in ``store``; none once older than ``max_age_seconds``.

    A stopped engine's evidence thus disappears instead of freezing; ``clock`` gives epoch seconds.
    """
    def read() -> list[dict[str, Any]]:
        saved = store.get_state(FINDINGS_STATE_NAME) or {}
        if clock() - saved.get("ts", float("-inf")) > max_age_seconds:
            return []
        findings: list[dict[str, Any]] = saved.get("findings", [])
        return findings
    return read
