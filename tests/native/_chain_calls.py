"""Python side of the chain tests: known callers and callbacks around the test extension.

Kept in its own module so that names and lines are exact; `# at:NAME` marks the line each frame
is expected to be on (see line_of).
"""

from __future__ import annotations

import threading
import traceback
from pathlib import Path

CORE = None   # set by install()
CHAIN = None

FILE = str(Path(__file__).resolve())


def install(core, chain) -> None:
    """Points the callers at the core module and the built extension."""
    global CORE, CHAIN
    CORE, CHAIN = core, chain


def line_of(marker: str) -> int:
    """Line of the `# at:<marker>` comment in this file."""
    for no, text in enumerate(Path(FILE).read_text().splitlines(), start=1):
        if text.rstrip().endswith(f"# at:{marker}"):
            return no
    raise KeyError(marker)


def callback():
    return CORE.native_callpath(with_status=True)  # at:callback


def callback_and_stack():
    return CORE.native_callpath(with_status=True), traceback.extract_stack()  # at:callback_and_stack


def recurse(n):
    """n levels of Python -> chain -> Python: deep enough to cut the native stack."""
    if n == 0:
        return callback_and_stack()  # at:recurse_leaf
    return CHAIN.chain(lambda: recurse(n - 1))  # at:recurse


def caller(fn=None):
    return CHAIN.chain(fn or callback)  # at:caller


def reenter():
    return helper()  # at:reenter


def helper():
    return CHAIN.chain(callback)  # at:helper


def nested():
    return CHAIN.chain(reenter)  # at:nested


def direct():
    return CHAIN.chain(CORE.native_callpath)  # at:direct


def gen():
    yield CHAIN.chain(callback)  # at:gen


def drive_gen():
    for r in gen():  # at:drive_gen
        return r


def in_thread():
    out = []
    t = threading.Thread(target=lambda: out.append(caller()))  # at:thread_lambda
    t.start()
    t.join()
    return out[0]
