"""Keeping a command's stdout for its result: whatever else is written goes to stderr.

A command that runs tasks in its own process (`sluice standalone`) would otherwise mix
what the tasks print (Python's `print`, a C library, a child process that inherits the
descriptor) into its result, and a `--json` result would no longer parse.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """While the block runs, file descriptor 1 is a copy of descriptor 2: everything this
    process (and any child it starts) writes to stdout goes to stderr. Afterwards
    stdout is the command's own again, for its result. What was written to `sys.stdout`
    inside the block is flushed before it ends, so none of it comes out after."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        with contextlib.suppress(Exception):  # a closed stdout: nothing left to flush
            sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
