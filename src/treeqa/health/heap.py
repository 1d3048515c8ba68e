"""What the C heap holds: bytes in use by live allocations and bytes freed but kept.

Host RSS can rise with no leak at all: glibc's malloc keeps freed blocks in its heap for
reuse, and when tensor sizes vary from step to step (trees of different shapes, length
buckets) the holes they leave fit later requests only in part, so the heap grows to a
high-water mark. ``mallinfo2`` tells the two apart: a leak raises the bytes in use, allocator
retention raises the free bytes. Tensor storage, autograd graphs and TensorImpls are all
allocated through malloc, so a leak of any of them shows in the bytes in use. On other C
libraries (musl, macOS) or glibc before 2.33 there is no reading and the monitor judges RSS
alone.
"""

from __future__ import annotations

import ctypes
import sys


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",  # bytes the heap has taken with brk (main arena) or mmap (thread arenas)
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",  # bytes in blocks malloc mmapped on their own (large allocations)
            "usmblks",
            "fsmblks",
            "uordblks",  # bytes in use in the arenas
            "fordblks",  # bytes free in the arenas (holes and the top chunk)
            "keepcost",
        )
    ]


def _mallinfo2() -> object | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        # The C library is already loaded into this process: look the symbol up there rather
        # than locate the file (ctypes.util.find_library runs ldconfig, ~40 ms at import).
        fn = ctypes.CDLL(None).mallinfo2  # glibc >= 2.33
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    fn.argtypes = []
    return fn


_READ = _mallinfo2()


def heap_mb() -> tuple[float, float] | None:
    """(in use, free) MB of the C heap, all arenas; None where glibc's mallinfo2 is absent.

    In use counts the arenas' live blocks and malloc's own mmapped blocks; free counts the
    arenas' free blocks, which are resident once touched. Costs a walk over malloc's bins:
    tens of microseconds on a fragmented heap, so the monitor reads it with RSS, not every step.
    """
    if _READ is None:
        return None
    info = _READ()  # type: ignore[operator]
    return (info.uordblks + info.hblkhd) / 2**20, info.fordblks / 2**20
