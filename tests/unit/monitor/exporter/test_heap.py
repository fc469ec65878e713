"""The exporter hands the heap a scrape freed back to the operating system (glibc), else does nothing."""

from __future__ import annotations

import ctypes

from monitor.exporter import heap


def test_release_freed_memory_returns_whether_it_asked():
    freed = [bytes(4096) for _ in range(2000)]
    del freed
    assert isinstance(heap.release_freed_memory(), bool)


def test_without_malloc_trim_it_does_nothing(monkeypatch):
    monkeypatch.setattr(heap, "_TRIM", None)
    assert heap.release_freed_memory() is False


def test_it_finds_malloc_trim_under_glibc_only(monkeypatch):
    class NoTrim:
        def __init__(self, _name: object) -> None:
            pass

    monkeypatch.setattr(ctypes, "CDLL", NoTrim)
    assert heap._malloc_trim() is None
