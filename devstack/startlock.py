"""One starter at a time: a server of the local stack is started by whichever process asks
first, and the others wait for it, then find it running (tests on several workers each ask
for the broker, the S3 server and PostgreSQL as their first test needs them)."""

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def held(home: Path, name: str = ".start.lock") -> Iterator[None]:
    """An exclusive lock on ``home/name`` for the block (the folder is made if missing); it
    is released when the block ends, or when the process holding it dies."""
    home.mkdir(parents=True, exist_ok=True)
    fd = os.open(home / name, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
