"""Versioned price map: dollars are computed at read time from tokens.

The map is TOML, USD per million tokens, one ``[[price]]`` entry per
(model, effective date)::

    [[price]]
    model = "*"              # any model not listed
    effective_from = 2025-01-01
    input = 3.0
    output = 15.0
    cached_input = 0.30

Guarantees: the entry used for (model, time) is the model's own history if
it has one, else the ``*`` history; within a history, the entry with the
latest ``effective_from`` not after the time. A time before a history's first
entry uses that first entry (prices are never missing once a model has one);
``at=None`` uses the newest entry. A model with no entry and no ``*`` raises
:class:`PricingError`. Cost of a trace = (tokens_in − cached)·input +
cached·cached_input + tokens_out·output (per million) + fees.
"""

from __future__ import annotations

import bisect
import datetime as dt
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

WILDCARD = "*"
PER_TOKENS = 1_000_000.0


class PricingError(ValueError):
    """A price map that cannot be read, or a model that has no price."""


@dataclass(frozen=True, slots=True)
class Price:
    model: str
    effective_from: float  # epoch seconds (UTC midnight of the date, or the datetime)
    input_usd_per_mtok: float
    output_usd_per_mtok: float
    cached_input_usd_per_mtok: float

    def cost_usd(self, tokens_in: float, tokens_cached_in: float, tokens_out: float) -> float:
        uncached = tokens_in - tokens_cached_in
        return (uncached * self.input_usd_per_mtok + tokens_cached_in * self.cached_input_usd_per_mtok
                + tokens_out * self.output_usd_per_mtok) / PER_TOKENS


def _epoch(value: Any, where: str) -> float:
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        return aware.timestamp()
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC).timestamp()
    raise PricingError(f"{where}: effective_from must be a TOML date or datetime, got {value!r}")


def _rate(entry: dict[str, Any], key: str, where: str, default: float | None = None) -> float:
    value = entry.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise PricingError(f"{where}: {key} must be a number >= 0 (USD per million tokens), got {value!r}")
    return float(value)


class PriceMap:
    """Price histories per model; see the module docstring for the rules."""

    def __init__(self, prices: list[Price], source: str = "<memory>") -> None:
        self.source = source
        self._history: dict[str, list[Price]] = {}
        for price in prices:
            self._history.setdefault(price.model, []).append(price)
        for model, history in self._history.items():
            history.sort(key=lambda p: p.effective_from)
            starts = [p.effective_from for p in history]
            if len(set(starts)) != len(starts):
                raise PricingError(f"{source}: model {model!r} has two entries with the same effective_from")
        self._starts = {m: [p.effective_from for p in h] for m, h in self._history.items()}

    @classmethod
    def from_toml(cls, text: str, source: str = "<string>") -> PriceMap:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise PricingError(f"{source}: not valid TOML: {exc}") from exc
        entries = data.get("price")
        if not isinstance(entries, list) or not entries:
            raise PricingError(f"{source}: needs at least one [[price]] entry")
        prices = []
        for i, entry in enumerate(entries, 1):
            where = f"{source} [[price]] #{i}"
            model = entry.get("model")
            if not isinstance(model, str) or not model:
                raise PricingError(f"{where}: model must be a non-empty string or \"*\", got {model!r}")
            unknown = set(entry) - {"model", "effective_from", "input", "output", "cached_input"}
            if unknown:
                raise PricingError(f"{where}: unknown keys {sorted(unknown)}; allowed: model, "
                                   "effective_from, input, output, cached_input")
            if "effective_from" not in entry:
                raise PricingError(f"{where}: effective_from is required")
            input_rate = _rate(entry, "input", where)
            prices.append(Price(model, _epoch(entry["effective_from"], where), input_rate,
                                _rate(entry, "output", where),
                                _rate(entry, "cached_input", where, default=input_rate)))
        return cls(prices, source)

    @classmethod
    def load(cls, path: str | Path | None = None) -> PriceMap:
        """Read a TOML price map; ``None`` loads the bundled default."""
        if path is None:
            text = resources.files("monitor").joinpath("prices.toml").read_text()
            return cls.from_toml(text, "default price map")
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise PricingError(f"cannot read price map {path}: {exc}") from exc
        return cls.from_toml(text, str(path))

    def price_for(self, model: str, at: float | None) -> Price:
        key = model if model in self._history else WILDCARD
        history = self._history.get(key)
        if history is None:
            raise PricingError(f"no price for model {model!r} in {self.source} and no \"*\" entry")
        if at is None:
            return history[-1]
        i = bisect.bisect_right(self._starts[key], at) - 1
        return history[max(i, 0)]

    def cost_usd(self, model: str, at: float | None, tokens_in: float, tokens_cached_in: float,
                 tokens_out: float, fees_usd: float = 0.0) -> float:
        return self.price_for(model, at).cost_usd(tokens_in, tokens_cached_in, tokens_out) + fees_usd
