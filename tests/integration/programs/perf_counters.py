"""Known page faults and context switches on known lines, with the kernel's own per-thread
counts (getrusage) around them printed as JSON for the test to compare."""

import json
import mmap
import resource
import sys
import time

PAGES = int(sys.argv[1])
SLEEPS = int(sys.argv[2])
PAGE = mmap.PAGESIZE


def spin(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def touch(n):
    m = mmap.mmap(-1, n * PAGE)
    m.madvise(mmap.MADV_NOHUGEPAGE)  # one fault per 4 KiB page, never one per 2 MiB
    for i in range(0, n * PAGE, PAGE):
        m[i] = 1
    return m


def sleeps(n):
    for _ in range(n):
        time.sleep(0.0005)


def usage():
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return {"faults": r.ru_minflt + r.ru_majflt, "switches": r.ru_nvcsw + r.ru_nivcsw,
            "voluntary": r.ru_nvcsw}


# Each measured line ends in a spin of several sample intervals, so the sample that reads the
# counters after the work lands on the same line; a quiet spin before it ends the previous one.
u0 = usage()
spin(0.05)  # QUIET1
u1 = usage()
kept = [touch(PAGES), spin(0.05)]  # TOUCH
u2 = usage()
spin(0.05)  # QUIET2
u3 = usage()
sleeps(SLEEPS) or spin(0.05)  # SLEEP
u4 = usage()
print(json.dumps({"before_touch": u0, "touch_start": u1, "touch_end": u2,
                  "before_sleep": u2, "sleep_start": u3, "sleep_end": u4}))
