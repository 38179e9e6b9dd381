"""Atomic file writes: a reader never sees half a file, a crash never leaves one.

An append is one line or nothing: a line cut short by a full disk is taken
back, and one cut short by a kill is ended before the next line is written,
so readers (which skip a line that does not parse) lose only that line.
Every ``OSError`` raised here names the file it was writing.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["write_atomic", "atomic_writer", "append_line", "DISK_FULL", "is_disk_full"]

DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
"""Errors that say the disk (or a quota, or a file size limit) has no room left."""


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_FULL


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_MODE = 0o666 & ~_umask()


def _named(exc: OSError, path: Path) -> OSError:
    """``exc`` naming ``path`` (``os.write`` errors name no file)."""
    if exc.filename is not None or exc.errno is None:
        return exc
    return type(exc)(exc.errno, exc.strerror, str(path))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with _replacing(path, "wb") as f:
        _write_all(f.fileno(), raw)


def atomic_writer(path: Path) -> contextlib.AbstractContextManager[IO[str]]:
    """A text file written a piece at a time that replaces ``path`` only when
    the block ends without an error (a file too big to hold in memory)."""
    return _replacing(path, "w")


@contextlib.contextmanager
def _replacing(path: Path, mode: str) -> Iterator[IO[Any]]:
    """A temporary file beside ``path`` that replaces it, synced, when the block
    ends without an error, and is removed when it does not."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise _named(exc, path) from None
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as f:
            yield f
            f.flush()
            os.fchmod(f.fileno(), _MODE)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise _named(exc, path) from None
        raise


def append_line(path: Path, line: str) -> None:
    """Append one line with a single write so concurrent appenders do not
    interleave; a line that cannot be written whole is not written at all."""
    data = (line.rstrip("\n") + "\n").encode("utf-8")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as exc:
        raise _named(exc, path) from None
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data  # a line a kill cut short stays a line of its own
        written = os.write(fd, data)
        if written != len(data):
            os.ftruncate(fd, size)  # take back the part that fitted
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    except OSError as exc:
        raise _named(exc, path) from None
    finally:
        os.close(fd)
