"""Source text of the small programs the reliability cases profile."""

#: Shared top of every program: a CPU-bound ``work`` that the sampler must see, and a
#: ``ready()`` that tells the harness (through a file named in argv[1]) when to strike.
PRELUDE = '''
import os, sys, time, signal

def work(seconds=0.3):
    end = time.process_time() + seconds
    n = 0
    while time.process_time() < end:
        n += 1
    return n

def ready():
    open(sys.argv[1], "w").close()

def wait_for_flush(seconds=0.35):
    # Several periodic flushes (interval 0.1 s) happen while the program sleeps.
    time.sleep(seconds)
'''


def program(body: str) -> str:
    """PRELUDE followed by ``body`` (written at column 0)."""
    return PRELUDE + "\n" + body.strip("\n") + "\n"
