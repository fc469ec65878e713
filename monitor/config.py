"""``fleetmon.toml``: one configuration file for every component, with environment overrides.

Every key can be overridden by ``FLEETMON_<SECTION>_<KEY>`` (upper case), e.g.
``FLEETMON_KAFKA_BOOTSTRAP``, ``FLEETMON_REDIS_URL``, ``FLEETMON_ALERTS_ALPHA``.
Values from the environment are parsed as the key's type (lists are
comma-separated). Validation happens at start and names the key, the value
and what is allowed; unknown keys are errors (a typo must not be ignored).

Secrets (``kafka.sasl_password``, ``kafka.ssl_password``, the password and
secret query values of ``redis.url``, ``notifiers.webhook_secret``, credentials
and tokens inside ``notifiers.webhook_url`` / ``alertmanager_url``) never appear
in ``repr``, logs or ``/metrics``: :meth:`Config.redacted` is what may be shown,
and :func:`load` hands them to :func:`monitor.redact.remember` for the log lines.

``[worker]`` (``fleetmon worker`` / ``rebuild``) parses its variables as the worker always did: empty is
ignored, numbers > 0, ``native`` 1/0, true/false, yes/no, on/off. :func:`monitor.worker_settings.worker_settings`
resolves a configuration for the worker; :mod:`monitor.kafka` builds Kafka client options from ``[kafka]``.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from monitor.groupings import GroupingSet, coerce_groupings, grouping_set
from monitor.redact import SECRET_KEYS, redact_notifier_url, redact_url, remember, secrets_of_url
from monitor.slices import DEFAULT_DIMENSIONS
from monitor.windows import parse_duration

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")


class ConfigError(ValueError):
    """A configuration value that cannot be used; names key, value and what is allowed."""


@dataclass(frozen=True)
class KafkaConfig:
    bootstrap: str = "localhost:9092"
    topic: str = "fleetmon.traces"
    dlq_topic: str = "fleetmon.traces.dlq"
    group_id: str = "fleetmon"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = ""
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)
    ssl_cafile: str = ""
    ssl_certfile: str = ""
    ssl_keyfile: str = ""
    ssl_password: str = field(default="", repr=False)


@dataclass(frozen=True)
class RedisConfig:
    url: str = field(default="redis://localhost:6379/0", repr=False)
    prefix: str = "fleetmon"
    cluster: bool = False  # url names one node of a Redis Cluster (monitor/store/redis/cluster.py)


@dataclass(frozen=True)
class SlicesConfig:
    dimensions: tuple[str, ...] = DEFAULT_DIMENSIONS
    max_values: int = 100
    #: Cross-dimension groupings beyond the defaults (monitor/groupings.py), each a tuple of dimensions.
    groupings: tuple[tuple[str, ...], ...] = ()
    grouping_budget: int = 1000
    #: Per-grouping budgets: (grouping name = its dimensions other than release and arm joined with ",", budget).
    grouping_budgets: tuple[tuple[str, int], ...] = ()

    def grouping_set(self) -> GroupingSet:
        """The groupings a trace is counted in (ValueError names a bad field, see monitor.groupings)."""
        return grouping_set(self.dimensions, self.groupings, self.grouping_budget, self.grouping_budgets)


@dataclass(frozen=True)
class WindowsConfig:
    minute_retention: str = "48h"
    hour_retention: str = "35d"


@dataclass(frozen=True)
class PricingConfig:
    price_map: str = ""  # empty: the bundled default map


@dataclass(frozen=True)
class AlertsConfig:
    alpha: float = 0.05
    success_floor: float = 0.02
    cost_floor: float = 0.10
    latency_floor: float = 0.10
    harmful_threshold: float = -1.0      # < 0: off
    over_refusal_threshold: float = -1.0  # < 0: off
    interval: str = "10s"
    pair_ttl: str = "1h"
    hold: str = "60s"
    renotify: str = "4h"
    recovery_min_pairs: int = 1000
    false_resolutions_per_day: float = 0.01  # sets the recovery detector's ARL (alerts.lifecycle)
    rearm_alpha: float = 0.01
    canary_lookback: str = "6h"   # how far back a new canary ledger starts
    canary_block: str = "10m"     # canary pairs are matched within task type and block (alerts.canary)
    restore_hold: str = "5m"      # after the store lost its state, no alert changes while workers restore it
    cost_cap_usd: float = 5.0     # per-trace cap of the capped-mean cost test (monitor.stats.capped_mean)
    latency_cap: str = "10m"      # per-trace cap of the capped-mean latency test
    environment_false_pages_per_year: float = 1.0  # FleetmonEnvironmentDrop's e-detector, per baseline release
    runbook_base_url: str = "docs/runbook.md"  # every page's runbook_url is <this>#<alertname in lower case>


@dataclass(frozen=True)
class NotifiersConfig:
    alertmanager_url: str = field(default="", repr=False)  # may carry credentials: shown redacted
    webhook_url: str = field(default="", repr=False)
    webhook_secret: str = field(default="", repr=False)
    runbook_base: str = ""  # deprecated alias of alerts.runbook_base_url (used when that one is left unset)


@dataclass(frozen=True)
class ExporterConfig:
    host: str = "127.0.0.1"
    port: int = 9464
    max_series: int = 20_000  # per scrape; past it the smallest slices fold into __other__ (exporter/budget.py)


@dataclass(frozen=True)
class WorkerConfig:
    batch_max_records: int = 200_000      # records per batch, at most
    batch_within: float = 1.0             # seconds a batch may wait to fill up
    max_record_bytes: int = 1024 * 1024   # largest value accepted as a trace; larger ones go to the DLQ
    partitions: int = 4                   # partitions of the topics the worker creates
    session_timeout: float = 10.0         # consumer group session timeout, seconds
    native: bool = True                   # fold with the native fast path (streams.native) when installed
    native_threads: int = 1               # threads that read a batch's records natively (grouping stays on one)


@dataclass(frozen=True)
class Config:
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    redis: RedisConfig = field(default_factory=RedisConfig)
    slices: SlicesConfig = field(default_factory=SlicesConfig)
    windows: WindowsConfig = field(default_factory=WindowsConfig)
    pricing: PricingConfig = field(default_factory=PricingConfig)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    notifiers: NotifiersConfig = field(default_factory=NotifiersConfig)
    exporter: ExporterConfig = field(default_factory=ExporterConfig)
    worker: WorkerConfig = field(default_factory=WorkerConfig)
    source: str = "defaults"

    def seconds(self, section: str, key: str) -> float:
        return parse_duration(getattr(getattr(self, section), key))

    def redacted(self) -> dict[str, dict[str, Any]]:
        """Every setting, with secrets replaced by ``***`` (safe to print or log)."""
        out: dict[str, dict[str, Any]] = {}
        for section in SECTIONS:
            values = {}
            for f in fields(getattr(self, section)):
                value = getattr(getattr(self, section), f.name)
                if f.name in SECRET_KEYS and value:
                    value = "***"
                elif section == "redis" and f.name == "url":
                    value = redact_url(value)
                elif section == "notifiers" and f.name in NOTIFIER_URLS:
                    value = redact_notifier_url(value)
                values[f.name] = list(value) if isinstance(value, tuple) else value
            out[section] = values
        return out

    def __repr__(self) -> str:
        return f"Config(source={self.source!r}, {self.redacted()!r})"


#: [notifiers] URLs that may carry a credential (user-info, query or path token): shown redacted
NOTIFIER_URLS = ("alertmanager_url", "webhook_url")
SECTIONS = ("kafka", "redis", "slices", "windows", "pricing", "alerts", "notifiers", "exporter", "worker")


def parse_positive(kind: Callable[[str], Any], name: str, text: str) -> Any:
    """``kind(text)`` when it is > 0; else ValueError naming ``name`` and the text."""
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not value > 0:
        raise ValueError(f"{name} must be a number > 0, got {text!r}")
    return value


def parse_switch(name: str, text: str) -> bool:
    """1/0, true/false, yes/no, on/off (any case) as a bool."""
    lowered = text.strip().lower()
    if lowered not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise ValueError(f"{name} must be 1 or 0 (true/false, on/off), got {text!r}")
    return lowered in ("1", "true", "yes", "on")


#: [worker] keys -> the parser of their text (environment variables and the worker's flags)
WORKER_KNOBS: dict[str, Callable[[str], Any]] = {
    "batch_max_records": lambda t: parse_positive(int, "batch max records", t),
    "batch_within": lambda t: parse_positive(float, "batch within", t),
    "max_record_bytes": lambda t: parse_positive(int, "max record bytes", t),
    "partitions": lambda t: parse_positive(int, "partitions", t),
    "session_timeout": lambda t: parse_positive(float, "session timeout", t),
    "native": lambda t: parse_switch("native", t),
    "native_threads": lambda t: parse_positive(int, "native threads", t),
}


def _coerce(where: str, value: Any, default: Any, from_env: bool) -> Any:
    if "slices.grouping" in where and not where.rstrip(")").endswith("grouping_budget"):
        try:
            return coerce_groupings(where, value, from_env)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    kind = type(default)
    shown = "***" if where.rsplit(".", 1)[-1] in SECRET_KEYS else repr(value)
    if kind is tuple:
        if from_env and isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(f"{where} must be a list of non-empty strings, got {shown}")
        return tuple(value)
    if kind is bool:
        if from_env and isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
            return value.lower() in ("true", "1")
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {shown}")
        return value
    if kind is int:
        if from_env and isinstance(value, str):
            try:
                value = int(value)
            except ValueError:
                raise ConfigError(f"{where} must be an integer, got {shown}") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, got {shown}")
        return value
    if kind is float:
        if from_env and isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(f"{where} must be a number, got {shown}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"{where} must be a finite number, got {shown}")
        return float(value)
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a string, got {shown}")
    return value


def _check(config: Config) -> None:
    def bad(key: str, value: Any, allowed: str) -> ConfigError:
        return ConfigError(f"{config.source}: {key} must be {allowed}, got {value!r}")

    k = config.kafka
    if not k.bootstrap or any(":" not in b for b in k.bootstrap.split(",")):
        raise bad("kafka.bootstrap", k.bootstrap, "host:port[,host:port...]")
    if k.security_protocol not in SECURITY_PROTOCOLS:
        raise bad("kafka.security_protocol", k.security_protocol, "one of " + ", ".join(SECURITY_PROTOCOLS))
    if k.sasl_mechanism and k.sasl_mechanism not in SASL_MECHANISMS:
        raise bad("kafka.sasl_mechanism", k.sasl_mechanism, "one of " + ", ".join(SASL_MECHANISMS))
    if k.security_protocol.startswith("SASL") and not k.sasl_mechanism:
        raise bad("kafka.sasl_mechanism", k.sasl_mechanism, f"set when security_protocol is {k.security_protocol}")
    scheme = urlsplit(config.redis.url).scheme
    if scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(f"{config.source}: redis.url must start with redis://, rediss:// (TLS) or unix://, "
                          f"got {redact_url(config.redis.url)!r}")
    if not config.redis.prefix or " " in config.redis.prefix:
        raise bad("redis.prefix", config.redis.prefix, "a non-empty key prefix without spaces")
    if config.redis.cluster and ("{" in config.redis.prefix or "}" in config.redis.prefix):
        raise bad("redis.prefix", config.redis.prefix, "without '{' or '}' when redis.cluster is true "
                  "(the cluster store adds hash tags after it)")
    if config.redis.cluster and scheme == "unix":
        raise bad("redis.url", redact_url(config.redis.url), "a redis:// or rediss:// node address when "
                  "redis.cluster is true")
    dims = config.slices.dimensions
    if not dims or len(set(dims)) != len(dims):
        raise bad("slices.dimensions", list(dims), "a non-empty list of distinct dimension names")
    if config.slices.max_values < 1:
        raise bad("slices.max_values", config.slices.max_values, "an integer >= 1")
    try:
        config.slices.grouping_set()
    except ValueError as exc:
        raise ConfigError(f"{config.source}: {exc}") from None
    for section, key in (("windows", "minute_retention"), ("windows", "hour_retention"), ("alerts", "interval"),
                         ("alerts", "pair_ttl"), ("alerts", "hold"), ("alerts", "renotify"),
                         ("alerts", "canary_lookback"), ("alerts", "canary_block"),
                         ("alerts", "latency_cap"), ("alerts", "restore_hold")):
        value = getattr(getattr(config, section), key)
        try:
            parse_duration(value)
        except ValueError:
            raise bad(f"{section}.{key}", value, "a duration like 90s, 5m, 2h or 7d") from None
    if config.seconds("windows", "minute_retention") < 60:
        raise bad("windows.minute_retention", config.windows.minute_retention, "at least 1m")
    if config.seconds("windows", "hour_retention") < 3600:
        raise bad("windows.hour_retention", config.windows.hour_retention, "at least 1h")
    a = config.alerts
    for key in ("success_floor", "cost_floor", "latency_floor"):
        if getattr(a, key) < 0:
            raise bad(f"alerts.{key}", getattr(a, key), "a number >= 0")
    for key in ("harmful_threshold", "over_refusal_threshold"):
        if getattr(a, key) > 1:
            raise bad(f"alerts.{key}", getattr(a, key), "a ratio in [0, 1], or negative to turn it off")
    if a.recovery_min_pairs < 1:
        raise bad("alerts.recovery_min_pairs", a.recovery_min_pairs, "an integer >= 1")
    for key in ("alpha", "false_resolutions_per_day", "rearm_alpha"):
        if not 0 < getattr(a, key) < 1:
            raise bad(f"alerts.{key}", getattr(a, key), "in (0, 1)")
    if not 0 < a.environment_false_pages_per_year < 8760:
        raise bad("alerts.environment_false_pages_per_year", a.environment_false_pages_per_year,
                  "a rate in (0, 8760): false pages a year")
    if not (0 < a.cost_cap_usd < math.inf and config.seconds("alerts", "latency_cap") > 0):
        raise bad("alerts.cost_cap_usd / latency_cap", (a.cost_cap_usd, a.latency_cap), "a finite cap > 0")
    if not a.runbook_base_url or "#" in a.runbook_base_url:
        raise bad("alerts.runbook_base_url", a.runbook_base_url, "a URL or path of docs/runbook.md, without '#'")
    n = config.notifiers
    for key in ("alertmanager_url", "webhook_url"):
        if getattr(n, key) and urlsplit(getattr(n, key)).scheme not in ("http", "https"):
            raise bad(f"notifiers.{key}", redact_notifier_url(getattr(n, key)), "an http:// or https:// URL, or empty")
    if n.webhook_url and not n.webhook_secret:
        raise ConfigError(f"{config.source}: notifiers.webhook_secret must be set when notifiers.webhook_url is "
                          "(receivers verify the HMAC-SHA256 signature)")
    if config.exporter.max_series < 100:
        raise bad("exporter.max_series", config.exporter.max_series, "an integer >= 100")
    if not 0 < config.exporter.port < 65536:
        raise bad("exporter.port", config.exporter.port, "a TCP port in 1..65535")
    if config.pricing.price_map and not Path(config.pricing.price_map).is_file():
        raise bad("pricing.price_map", config.pricing.price_map, "a readable TOML file, or empty for the default")
    for key in ("batch_max_records", "batch_within", "max_record_bytes", "partitions", "session_timeout",
                "native_threads"):
        if not getattr(config.worker, key) > 0:
            raise bad(f"worker.{key}", getattr(config.worker, key), "a number > 0")


def load(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Read ``path`` (optional), apply ``FLEETMON_<SECTION>_<KEY>`` overrides, validate."""
    env = os.environ if env is None else env
    data: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        source = str(path)
        try:
            data = tomllib.loads(Path(path).read_text())
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    unknown = set(data) - set(SECTIONS)
    if unknown:
        raise ConfigError(f"{source}: unknown sections {sorted(unknown)}; allowed: {', '.join(SECTIONS)}")
    config = Config(source=source)
    for section in SECTIONS:
        current = getattr(config, section)
        table = data.get(section, {})
        if not isinstance(table, dict):
            raise ConfigError(f"{source}: [{section}] must be a table")
        names = {f.name for f in fields(current)}
        extra = set(table) - names
        if extra:
            raise ConfigError(f"{source}: unknown keys {sorted(extra)} in [{section}]; "
                              f"allowed: {', '.join(sorted(names))}")
        updates = {}
        for f in fields(current):
            default = getattr(current, f.name)
            if f.name in table:
                updates[f.name] = _coerce(f"{section}.{f.name}", table[f.name], default, from_env=False)
            env_key = f"FLEETMON_{section}_{f.name}".upper()
            if env_key in env and section != "worker":
                updates[f.name] = _coerce(f"{env_key} ({section}.{f.name})", env[env_key], default, from_env=True)
            elif env.get(env_key):  # [worker] parses as the worker always did; an empty variable is ignored
                try:
                    updates[f.name] = WORKER_KNOBS[f.name](env[env_key])
                except ValueError as exc:
                    raise ConfigError(f"{env_key}: {exc}") from None
        config = replace(config, **{section: replace(current, **updates)})
    if config.notifiers.runbook_base and config.alerts.runbook_base_url == AlertsConfig.runbook_base_url:
        config = replace(config, alerts=replace(config.alerts, runbook_base_url=config.notifiers.runbook_base))
    # every log line of the process masks these values from now on (monitor.redact.install_log_redaction)
    remember([config.kafka.sasl_password, config.kafka.ssl_password, config.notifiers.webhook_secret,
              *secrets_of_url(config.redis.url), *secrets_of_url(config.notifiers.webhook_url),
              *secrets_of_url(config.notifiers.alertmanager_url)])
    _check(config)
    return config
