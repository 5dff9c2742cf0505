"""Loads every lib*.so in a directory (copies of ext/tls_allocating_init.c's library), a quarter
from each of four threads, and prints how many it loaded."""

import ctypes
import sys
import threading
from pathlib import Path

libraries = sorted(Path(sys.argv[1]).glob("lib*.so"))


def load(part):
    for path in part:
        ctypes.CDLL(str(path))


threads = [threading.Thread(target=load, args=(libraries[k::4],)) for k in range(1, 4)]
for t in threads:
    t.start()
load(libraries[0::4])
for t in threads:
    t.join()
print(f"loaded {len(libraries)}")
