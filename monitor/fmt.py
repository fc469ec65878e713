"""Number formatting for people: round half up on the shortest decimal form.

``format(0.20875, ".4f")`` gives ``0.2087`` because the binary double sits just
below the half; a reader rounding the printed exact figure gets ``0.2088``.
Reports use :func:`fixed` so that the digits shown are the ones a person
computing by hand would write down.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal


def fixed(value: float, places: int, sign: bool = False) -> str:
    """``value`` with ``places`` decimals, half up; ``sign`` forces a leading ``+``."""
    rounded = Decimal(repr(float(value))).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    text = f"{rounded:f}"
    return ("+" + text) if sign and rounded >= 0 else text
