"""Giving the heap a scrape freed back to the operating system (glibc's ``malloc_trim``).

A scrape allocates and frees far more than the exporter keeps: the windows' text as Redis
sends it (about 60 MB for the first scrape of 1,000 slices with an hour of minute windows),
the rendered body and the replies. glibc keeps freed memory in its heap, so without a trim
the process stays resident at its largest scrape's size. :func:`release_freed_memory` asks
glibc to return the free pages (a few milliseconds); under any other C library it does
nothing. It frees nothing the process still holds, and the peak (VmHWM) is unchanged.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own C library
    except (OSError, AttributeError):
        return None  # not glibc (musl, macOS): nothing to ask
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_TRIM = _malloc_trim()


def release_freed_memory() -> bool:
    """Return the heap's free pages to the operating system; whether any were (False: none, or not glibc)."""
    return _TRIM is not None and bool(_TRIM(0))
