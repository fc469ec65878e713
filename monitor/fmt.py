"""Number formatting for people: round half up on the shortest decimal form.

``format(0.20875, ".4f")`` gives ``0.2087`` because the binary double sits just
below the half; a reader rounding the printed exact figure gets ``0.2088``.
Reports use :func:`fixed` so that the digits shown are the ones a person
computing by hand would write down.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal
from typing import Any


def fixed(value: float, places: int, sign: bool = False) -> str:
    """``value`` with ``places`` decimals, half up; ``sign`` forces a leading ``+``."""
    rounded = Decimal(repr(float(value))).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    text = f"{rounded:f}"
    return ("+" + text) if sign and rounded >= 0 else text


def json_safe(value: Any) -> Any:
    """``value`` with every float JSON can hold: nan → None, ±inf → ``"inf"`` / ``"-inf"``.

    Dict keys become strings and tuples lists, so the result passes
    ``json.dumps(..., allow_nan=False)``. Used for every JSON fleetmon writes
    (reports, alert lines, notifications) so they agree on the encoding.
    """
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
