"""How commands print: JSON documents that are always valid JSON (nan -> null, inf -> "inf") and exit codes."""

from __future__ import annotations

import json
from typing import Any

from monitor.fmt import json_safe

EXIT_OK, EXIT_GATE_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def dumps(value: Any) -> str:
    return json.dumps(json_safe(value), default=_json_default, allow_nan=False)
