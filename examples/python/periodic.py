#!/usr/bin/env python3
"""A periodic loop written with asyncio, to point `rtlab watch` at.

One thread, named "rt-loop", runs an asyncio event loop whose only task wakes every
PERIOD_US on absolute deadlines of the loop's clock (time.monotonic(): CLOCK_MONOTONIC) and
measures its own lateness. At the end it prints "samples N p50 X p99 Y max Z" (ns); with
LOG=path each period's deadline and lateness ("deadline_ns late_ns") go to that file.

How it waits (HOW):
  asyncio  await asyncio.sleep(deadline - loop.time()) (the default): the loop's selector
           waits in epoll_wait with the time left, which Python rounds up to whole ms
  sleep    time.sleep(deadline - time.monotonic()) (clock_nanosleep, relative)

Usage: periodic.py [SECONDS] [PERIOD_US]

    sudo rtlab watch --thread rt-loop -- python3 examples/python/periodic.py 10 1000
"""
import asyncio
import ctypes
import os
import sys
import time


def name_this_thread(name: bytes) -> None:
    """The thread's name as the kernel has it (prctl PR_SET_NAME), for `--thread`."""
    PR_SET_NAME = 15
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)


def report(late: list, deadlines: list) -> None:
    log = os.environ.get("LOG")
    if log:
        with open(log, "w") as f:
            f.writelines(f"{d} {l}\n" for d, l in zip(deadlines, late))
    s = sorted(late)
    if not s:
        print("samples 0")
        return
    q = lambda p: s[min(len(s) - 1, int(len(s) * p))]
    print(f"samples {len(s)} p50 {q(0.5)} p99 {q(0.99)} max {s[-1]}")


async def run_asyncio(periods: int, period_ns: int, late: list, deadlines: list) -> None:
    next_ns = time.monotonic_ns() + period_ns
    for _ in range(periods):
        await asyncio.sleep(max(0, next_ns - time.monotonic_ns()) / 1e9)
        now = time.monotonic_ns()
        late.append(max(0, now - next_ns))
        deadlines.append(next_ns)
        next_ns += period_ns


def run_sleep(periods: int, period_ns: int, late: list, deadlines: list) -> None:
    next_ns = time.monotonic_ns() + period_ns
    for _ in range(periods):
        left = next_ns - time.monotonic_ns()
        if left > 0:
            time.sleep(left / 1e9)
        now = time.monotonic_ns()
        late.append(max(0, now - next_ns))
        deadlines.append(next_ns)
        next_ns += period_ns


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
    period_ns = int(sys.argv[2]) * 1000 if len(sys.argv) > 2 else 1_000_000
    how = os.environ.get("HOW", "asyncio")
    if period_ns <= 0 or seconds <= 0 or how not in ("asyncio", "sleep"):
        print("usage: periodic.py [SECONDS>0] [PERIOD_US>0]; HOW=asyncio|sleep", file=sys.stderr)
        return 2
    name_this_thread(b"rt-loop")
    periods = int(seconds * 1e9 / period_ns)
    late, deadlines = [], []
    if how == "asyncio":
        asyncio.run(run_asyncio(periods, period_ns, late, deadlines))
    else:
        run_sleep(periods, period_ns, late, deadlines)
    report(late, deadlines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
