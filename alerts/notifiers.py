"""Where alert state changes go: stdout JSON lines, Alertmanager v2, a signed webhook.

One protocol per destination (:class:`Notifier`): ``name`` (for logs and
failure counts), ``send(events)`` for state changes (firing, resolved, the
reminder) and ``refresh(active, now)`` for the alerts currently firing, called
at every evaluation. Both raise :class:`NotifyError` naming the target and the
reason. Each destination says what it needs:

* :class:`StdoutNotifier` — one JSON object per line per event, keys ``ts``,
  ``status``, ``alertname``, ``labels``, ``annotations``, ``evidence``,
  ``fingerprint``, ``startsAt``, ``endsAt``. No refresh.
* :class:`AlertmanagerNotifier` — ``POST {url}/api/v2/alerts``. Alertmanager
  resolves an alert that is not re-posted before its ``endsAt`` (or its
  ``resolve_timeout`` when none is given), so every firing alert is re-posted
  at every evaluation (``refresh``) with its firing start as ``startsAt`` and
  ``endsAt`` = wall clock + ``ends_after_seconds`` (:func:`ends_after`: 4
  evaluation intervals, at least 3 min, as Prometheus does); a resolution is
  posted with ``endsAt`` = the resolution time. Evidence is flattened into
  annotations (``evidence_json`` carries the whole record).
* :class:`WebhookNotifier` — ``POST`` of an Alertmanager-v4-shaped payload
  (``receiver``, ``status``, ``alerts[]``, ``groupLabels``, ...) plus each
  alert's ``evidence``, signed with HMAC-SHA256: header
  ``X-Fleetmon-Signature: sha256=<hex>`` over ``<timestamp>.<body>`` and
  ``X-Fleetmon-Timestamp`` (epoch seconds); :func:`verify` rejects a
  request older than ``max_age_seconds``, so a captured one cannot be
  replayed. No refresh.

Delivery state lives per destination in the engine (:class:`FanOut` only
groups destinations): a failed destination is retried alone.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, TextIO

from alerts.lifecycle import AlertEvent
from monitor.fmt import json_safe

SIGNATURE_HEADER = "X-Fleetmon-Signature"
TIMESTAMP_HEADER = "X-Fleetmon-Timestamp"


class NotifyError(RuntimeError):
    """A delivery failed; the message names the target and the reason."""


#: Default oldest webhook request :func:`verify` accepts (seconds).
MAX_AGE_SECONDS = 300.0


class Notifier(Protocol):
    """A destination. ``send``: state changes, each once; ``refresh``: the firing alerts, every evaluation.

    The engine also accepts an object with ``send`` only (named by its class, no refresh).
    """

    name: str

    def send(self, events: Sequence[AlertEvent]) -> None: ...

    def refresh(self, active: Sequence[AlertEvent], now: float) -> None: ...


class OnChange:
    """Base of destinations that want each state change once: ``refresh`` does nothing."""

    name = "notifier"

    def refresh(self, active: Sequence[AlertEvent], now: float) -> None:
        return None


def ends_after(interval_seconds: float) -> float:
    """``endsAt`` lead of a re-posted firing alert: 4 evaluation intervals, at least 3 minutes."""
    return max(4.0 * interval_seconds, 180.0)


def rfc3339(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, tz=UTC).isoformat().replace("+00:00", "Z")


def event_record(event: AlertEvent) -> dict[str, Any]:
    """The JSON line of one state change (the ``fleetmon run`` stdout contract)."""
    record: dict[str, Any] = json_safe({
        "ts": event.ts, "status": event.status, "alertname": event.alertname, "labels": event.labels,
        "annotations": event.annotations, "evidence": event.evidence, "fingerprint": event.fingerprint,
        "startsAt": rfc3339(event.starts_at), "endsAt": rfc3339(event.ends_at),
    })
    return record


class StdoutNotifier(OnChange):
    name = "stdout"

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream

    def send(self, events: Sequence[AlertEvent]) -> None:
        stream = self.stream or sys.stdout
        for event in events:
            stream.write(json.dumps(event_record(event), allow_nan=False) + "\n")
        stream.flush()


def _post(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> int:
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as exc:
        detail = exc.read(500).decode("utf-8", "replace")
        raise NotifyError(f"POST {url} answered {exc.code}: {detail}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise NotifyError(f"POST {url} failed: {getattr(exc, 'reason', exc)}") from exc


def alertmanager_alert(event: AlertEvent, generator_url: str = "", ends_at: float | None = None) -> dict[str, Any]:
    """The Alertmanager v2 alert of ``event``; a firing one gets ``endsAt`` only when ``ends_at`` is given."""
    evidence = json_safe(event.evidence)
    annotations = dict(event.annotations)
    annotations["evidence_json"] = json.dumps(evidence, sort_keys=True, allow_nan=False)
    for key in ("n_pairs", "b", "c", "effect", "effect_low", "effect_high", "e_value", "floor", "alpha"):
        if key in evidence and evidence[key] is not None:
            annotations[f"evidence_{key}"] = str(evidence[key])
    alert = {"labels": {"alertname": event.alertname, **event.labels}, "annotations": annotations,
             "startsAt": rfc3339(event.starts_at)}
    if event.status == "resolved":
        alert["endsAt"] = rfc3339(event.ends_at or event.ts)
    elif ends_at is not None:
        alert["endsAt"] = rfc3339(ends_at)
    if generator_url:
        alert["generatorURL"] = generator_url
    return alert


class AlertmanagerNotifier:
    """Posts changes and re-posts firing alerts; ``endsAt`` of a firing alert is ``clock() + ends_after_seconds``.

    ``clock`` is the wall clock (Alertmanager expires alerts by its own), whatever the engine's ``now``.
    """

    name = "alertmanager"

    def __init__(self, url: str, timeout: float = 5.0, generator_url: str = "",
                 ends_after_seconds: float = ends_after(10.0), clock: Callable[[], float] = time.time) -> None:
        if not ends_after_seconds > 0:
            raise ValueError(f"AlertmanagerNotifier ends_after_seconds must be > 0, got {ends_after_seconds!r}")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.generator_url = generator_url
        self.ends_after_seconds = ends_after_seconds
        self.clock = clock

    def alerts(self, events: Sequence[AlertEvent]) -> list[dict[str, Any]]:
        ends_at = self.clock() + self.ends_after_seconds
        return [alertmanager_alert(e, self.generator_url, ends_at) for e in events]

    def send(self, events: Sequence[AlertEvent]) -> None:
        if not events:
            return
        body = json.dumps(self.alerts(events), allow_nan=False).encode()
        _post(f"{self.url}/api/v2/alerts", body, {}, self.timeout)

    def refresh(self, active: Sequence[AlertEvent], now: float) -> None:
        self.send(active)


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def verify(secret: bytes, timestamp: str, body: bytes, signature: str, max_age_seconds: float = MAX_AGE_SECONDS,
           now: float | None = None) -> bool:
    """For receivers: constant-time check of the signature, and the request is at most ``max_age_seconds`` old.

    ``timestamp`` is the ``X-Fleetmon-Timestamp`` header; ``now`` defaults to the wall clock. A timestamp that
    is not an integer, or more than ``max_age_seconds`` in the future (clock skew), fails too.
    """
    try:
        sent = int(timestamp)
    except ValueError:
        return False
    age = (time.time() if now is None else now) - sent
    if not -max_age_seconds <= age <= max_age_seconds:
        return False
    return hmac.compare_digest(sign(secret, timestamp, body), signature)


class WebhookNotifier(OnChange):
    name = "webhook"

    def __init__(self, url: str, secret: str | bytes, timeout: float = 5.0, receiver: str = "fleetmon",
                 clock: Any = None) -> None:
        if not secret:
            raise ValueError("webhook secret must be non-empty: receivers verify the HMAC-SHA256 signature")
        self.url = url
        self.secret = secret.encode() if isinstance(secret, str) else secret
        self.timeout = timeout
        self.receiver = receiver
        self.clock = clock

    def payload(self, events: Sequence[AlertEvent]) -> dict[str, Any]:
        alerts = []
        for event in events:
            alert = alertmanager_alert(event)
            alert.update(status=event.status, fingerprint=event.fingerprint, evidence=json_safe(event.evidence),
                         endsAt=rfc3339(event.ends_at) or "0001-01-01T00:00:00Z", generatorURL="")
            alerts.append(alert)
        common = set.intersection(*(set(a["labels"].items()) for a in alerts)) if alerts else set()
        return {"version": "4", "receiver": self.receiver,
                "status": "firing" if any(e.status == "firing" for e in events) else "resolved",
                "alerts": alerts, "groupLabels": {}, "commonLabels": dict(common), "commonAnnotations": {},
                "externalURL": "", "groupKey": "fleetmon", "truncatedAlerts": 0}

    def send(self, events: Sequence[AlertEvent]) -> None:
        if not events:
            return
        body = json.dumps(self.payload(events), allow_nan=False, sort_keys=True).encode()
        now = self.clock() if self.clock else datetime.now(UTC).timestamp()
        timestamp = str(int(now))
        _post(self.url, body, {SIGNATURE_HEADER: sign(self.secret, timestamp, body), TIMESTAMP_HEADER: timestamp},
              self.timeout)


class FanOut:
    """Several destinations. The engine delivers to each separately (its own retry state);
    called directly, every one is tried and the failures are collected into one :class:`NotifyError`."""

    name = "fanout"

    def __init__(self, notifiers: Sequence[Notifier]) -> None:
        self.notifiers = list(notifiers)

    def _each(self, call: Callable[[Notifier], None]) -> None:
        errors = []
        for notifier in self.notifiers:
            try:
                call(notifier)
            except NotifyError as exc:
                errors.append(str(exc))
        if errors:
            raise NotifyError("; ".join(errors))

    def send(self, events: Sequence[AlertEvent]) -> None:
        self._each(lambda n: n.send(events))

    def refresh(self, active: Sequence[AlertEvent], now: float) -> None:
        self._each(lambda n: n.refresh(active, now))


def destinations(notifier: Notifier) -> list[Notifier]:
    """The single destinations of ``notifier`` (a :class:`FanOut` is flattened)."""
    if isinstance(notifier, FanOut):
        return [d for n in notifier.notifiers for d in destinations(n)]
    return [notifier]
