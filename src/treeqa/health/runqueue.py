"""How long the step's thread waited for a CPU: other processes' load, told apart from the
script's own slowing (``timing.step_time_regression``, ``profile.py``)."""

from __future__ import annotations

import math
import os
import threading

Reading = tuple[int, float]
"""(a thread's id, the seconds it had waited on a run queue when read)."""


class RunQueue:
    """The second field of the kernel's schedstat (nanoseconds runnable but not running, since
    the thread started). One ``pread`` of a file kept open, ~5-10 us; where the file is missing
    (macOS, a kernel built without it) the reading is NaN and the checks do without it."""

    def __init__(self) -> None:
        self.fd, self.tid, self.missing = -1, -1, False

    def waited(self) -> Reading:
        """(the calling thread's id, the seconds it has waited on a run queue so far)."""
        tid = threading.get_native_id()
        if self.missing:
            return tid, math.nan
        try:
            if tid != self.tid:  # the first read, another thread or a forked child
                if self.fd >= 0:
                    os.close(self.fd)
                self.fd, self.tid = -1, -1
                self.fd = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
                self.tid = tid
            return tid, int(os.pread(self.fd, 64, 0).split()[1]) * 1e-9
        except (OSError, IndexError, ValueError):
            self.missing = True
            return tid, math.nan


RUN_QUEUE = RunQueue()


def waited_since(begin: Reading, now: Reading) -> float:
    """Seconds waited between two readings; NaN when they are of two threads."""
    return now[1] - begin[1] if now[0] == begin[0] else math.nan
