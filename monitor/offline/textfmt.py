"""Number formatting shared by the text renderings of a compare report ("-" for None, "inf", "nan")."""

from __future__ import annotations

import math
from typing import Any

from monitor.fmt import fixed


def _num(value: Any, fmt: str = ".3f") -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, float) and fmt.endswith("f"):
        return fixed(value, int(fmt.rstrip("f").lstrip("+")[1:] or 0), sign=fmt.startswith("+"))
    return format(value, fmt)


def _usd(value: Any) -> str:
    return "$" + _num(value, ".4f") if value is not None and math.isfinite(value) else _num(value)


def _ci(pair: Any, fmt: str = ".3f") -> str:
    return f"[{_num(pair[0], fmt)}, {_num(pair[1], fmt)}]"
