"""Known page faults and context switches on known lines, with the kernel's own per-thread
counts around them printed as JSON for the test to compare: getrusage's, and the same software
events deepcontext reads (perf_event_open), which also count a fault the kernel retries
(VM_FAULT_RETRY: getrusage counts it once, perf at each entry; 2,048 perf faults against
getrusage's 2,039 in one CI-sized run)."""

import ctypes
import json
import mmap
import os
import platform
import resource
import struct
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


def software_counter(config):
    """This thread's PERF_TYPE_SOFTWARE counter ``config``, kernel side included where
    permitted, as deepcontext's core opens it; -1 if it cannot be opened."""
    libc = ctypes.CDLL(None, use_errno=True)
    nr = {"x86_64": 298, "aarch64": 241}[platform.machine()]
    for exclude_kernel in (0, 1):
        # perf_event_attr, PERF_ATTR_SIZE_VER0 (64 bytes): type, size, config, then the flag
        # word at byte 40 (bit 5 exclude_kernel, bit 6 exclude_hv)
        flags = (exclude_kernel << 5) | (1 << 6)
        packed = struct.pack("IIQQQQQ", 1, 64, config, 0, 0, 0, flags)
        attr = ctypes.create_string_buffer(packed, 64)
        fd = libc.syscall(nr, attr, 0, -1, -1, ctypes.c_ulong(8))  # PERF_FLAG_FD_CLOEXEC
        if fd >= 0:
            return fd
    return -1


FAULTS, SWITCHES = software_counter(2), software_counter(3)  # PAGE_FAULTS, CONTEXT_SWITCHES


def read(fd):
    return struct.unpack("Q", os.read(fd, 8))[0] if fd >= 0 else None


def usage():
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return {"faults": r.ru_minflt + r.ru_majflt, "switches": r.ru_nvcsw + r.ru_nivcsw,
            "voluntary": r.ru_nvcsw, "perf_faults": read(FAULTS), "perf_switches": read(SWITCHES)}


# Each measured line ends in a spin of 40 sample intervals, so the sample that reads the
# counters after the work lands on the same line; a quiet spin before it ends the previous one.
u0 = usage()
spin(0.2)  # QUIET1
u1 = usage()
kept = [touch(PAGES), spin(0.2)]  # TOUCH
u2 = usage()
spin(0.2)  # QUIET2
u3 = usage()
sleeps(SLEEPS) or spin(0.2)  # SLEEP
u4 = usage()
print(json.dumps({"before_touch": u0, "touch_start": u1, "touch_end": u2,
                  "before_sleep": u2, "sleep_start": u3, "sleep_end": u4}))
