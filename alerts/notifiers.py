"""Where alert state changes go: stdout JSON lines, Alertmanager v2, a signed webhook.

One protocol: ``Notifier.send(events) -> None`` raising :class:`NotifyError`
with the target and the reason. Delivery is synchronous and bounded by a
timeout; the engine logs a failed delivery and retries the same events at
its next tick (Alertmanager deduplicates by label set, the webhook receiver
by ``fingerprint`` + ``status`` + ``startsAt``).

* :class:`StdoutNotifier` — one JSON object per line per event, keys ``ts``,
  ``status``, ``alertname``, ``labels``, ``annotations``, ``evidence``,
  ``fingerprint``, ``startsAt``, ``endsAt``.
* :class:`AlertmanagerNotifier` — ``POST {url}/api/v2/alerts`` with the
  alerts' labels and annotations; evidence is flattened into annotations
  (``evidence_json`` carries the whole record) since Alertmanager has no
  other place for it. A resolved event is posted with ``endsAt`` set.
* :class:`WebhookNotifier` — ``POST`` of an Alertmanager-v4-shaped payload
  (``receiver``, ``status``, ``alerts[]``, ``groupLabels``, ...) plus each
  alert's ``evidence``, signed with HMAC-SHA256 over the exact body bytes:
  header ``X-Fleetmon-Signature: sha256=<hex>`` and ``X-Fleetmon-Timestamp``
  (the signature covers ``<timestamp>.<body>`` so a captured request cannot
  be replayed later with a fresh timestamp).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, TextIO

from alerts.lifecycle import AlertEvent
from monitor.fmt import json_safe

SIGNATURE_HEADER = "X-Fleetmon-Signature"
TIMESTAMP_HEADER = "X-Fleetmon-Timestamp"


class NotifyError(RuntimeError):
    """A delivery failed; the message names the target and the reason."""


class Notifier(Protocol):
    def send(self, events: Sequence[AlertEvent]) -> None: ...


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


class StdoutNotifier:
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


def alertmanager_alert(event: AlertEvent, generator_url: str = "") -> dict[str, Any]:
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
    if generator_url:
        alert["generatorURL"] = generator_url
    return alert


class AlertmanagerNotifier:
    def __init__(self, url: str, timeout: float = 5.0, generator_url: str = "") -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.generator_url = generator_url

    def send(self, events: Sequence[AlertEvent]) -> None:
        if not events:
            return
        body = json.dumps([alertmanager_alert(e, self.generator_url) for e in events], allow_nan=False).encode()
        _post(f"{self.url}/api/v2/alerts", body, {}, self.timeout)


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def verify(secret: bytes, timestamp: str, body: bytes, signature: str) -> bool:
    """Constant-time check of a webhook signature (for receivers)."""
    return hmac.compare_digest(sign(secret, timestamp, body), signature)


class WebhookNotifier:
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
    """Send to several notifiers; every one is tried, failures are collected."""

    def __init__(self, notifiers: Sequence[Notifier]) -> None:
        self.notifiers = list(notifiers)

    def send(self, events: Sequence[AlertEvent]) -> None:
        errors = []
        for notifier in self.notifiers:
            try:
                notifier.send(events)
            except NotifyError as exc:
                errors.append(str(exc))
        if errors:
            raise NotifyError("; ".join(errors))
