"""``python -m bench._cpu_profile OUTPUT MODULE ARGS…``: run ``python -m MODULE ARGS…``
with cProfile timed by the main thread's CPU clock, on between SIGUSR1 and SIGUSR2; at
SIGUSR2 the stats are written to OUTPUT.

A wall-clock profiler on a loaded machine charges a function for the time the process
waited for a core, or for the peer a ``send`` woke up; this one charges only the CPU the
serving thread spent. Profiling only the measured load (not the start, nor a warm-up)
makes each figure divided by the requests of that load a cost per request. Every call is
traced, which slows the process about twofold: the shares between functions are what it
is read for.
"""

from __future__ import annotations

import cProfile
import runpy
import signal
import sys
import time
from types import FrameType


def main() -> None:
    output, module, *args = sys.argv[1:]
    sys.argv = [module, *args]
    profiler = cProfile.Profile(time.thread_time)

    def start(signum: int, frame: FrameType | None) -> None:
        profiler.enable()

    def stop(signum: int, frame: FrameType | None) -> None:
        profiler.disable()
        profiler.dump_stats(output)

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
