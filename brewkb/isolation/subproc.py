"""Run an external program safely: argv (never a shell), JSON on stdin, output
capped, a deadline, and no process left behind.

On Linux the program runs under ``reaper.py``, a child subreaper that kills every
descendant when the program exits or the deadline passes — including ones that
left the process group with ``setsid`` — so a child that still holds stdout
cannot keep a finished program's output waiting. A program that kills the reaper
itself orphans its descendants; each run therefore also marks the environment of
everything it starts with a token of its own (``BREWKB_EPISODE``), and when the
reaper is gone every process still carrying the token is killed. Elsewhere the
process group is killed.
"""

from __future__ import annotations

import os
import secrets
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Completed", "run_capped", "stop_all"]

STDERR_KEEP = 64_000
REAPER = Path(__file__).with_name("reaper.py")
CANNOT_START = 127  # reaper.py's status when the program cannot be started
GRACE = 10.0  # seconds the reaper gets to kill the tree before its group is killed

TOKEN_VAR = "BREWKB_EPISODE"
_LIVE: set[subprocess.Popen[bytes]] = set()
"""Programs ``run_capped`` is running now, in any thread."""


@dataclass(frozen=True)
class Completed:
    """What a program did. ``problem`` is set when it timed out, flooded its
    output or could not start; ``returncode`` is ``None`` then."""

    stdout: bytes
    stderr: bytes
    returncode: int | None
    problem: str | None
    seconds: float


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Ask the reaper to kill the tree (it exits when done); then kill its group."""
    if sys.platform.startswith("linux"):
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(GRACE)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def stop_all() -> None:
    """Ask every running program's reaper to kill its tree now (the command was
    interrupted): the threads waiting on them return at once instead of at
    their deadlines."""
    for proc in list(_LIVE):
        try:
            proc.send_signal(signal.SIGTERM if sys.platform.startswith("linux") else signal.SIGKILL)
        except (ProcessLookupError, OSError):
            pass


def _contained(argv: Sequence[str]) -> list[str]:
    if sys.platform.startswith("linux"):
        return [sys.executable, "-I", "-S", str(REAPER), *argv]
    return list(argv)


def run_capped(argv: Sequence[str], stdin: bytes, *, timeout: float, max_output: int,
               cwd: Path | None = None, env: Mapping[str, str] | None = None) -> Completed:
    """Run ``argv`` with ``stdin``; kill it and all its descendants at ``timeout``
    seconds or when stdout exceeds ``max_output`` bytes, and its descendants
    anyway when it exits."""
    start = time.monotonic()
    token = secrets.token_hex(8)
    try:
        proc = subprocess.Popen(_contained(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=cwd, env={**(os.environ if env is None else env), TOKEN_VAR: token},
                                start_new_session=True)
    except OSError as exc:
        return Completed(b"", b"", None, f"cannot start {argv[0]!r}: {exc.strerror}", 0.0)
    _LIVE.add(proc)
    try:
        return _collect(proc, stdin, start, timeout, max_output, token)
    finally:
        _LIVE.discard(proc)
        if sys.platform.startswith("linux"):
            _kill_marked(token)


def _kill_marked(token: str) -> None:
    """Kill every process whose environment carries ``token`` (what a killed
    reaper left behind)."""
    mark = f"{TOKEN_VAR}={token}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                marked = mark in f.read().split(b"\0")
            if marked:
                os.kill(int(entry), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue


def _collect(proc: subprocess.Popen[bytes], stdin: bytes, start: float, timeout: float,
             max_output: int, token: str) -> Completed:
    assert proc.stdin and proc.stdout and proc.stderr
    try:
        proc.stdin.write(stdin)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    out, err = bytearray(), bytearray()
    problem = None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ, out)
    selector.register(proc.stderr, selectors.EVENT_READ, err)
    open_streams = 2
    while open_streams:
        remaining = timeout - (time.monotonic() - start)
        if remaining <= 0:
            problem = f"timed out after {timeout:g} s; the process and its descendants were killed"
            break
        ready = selector.select(min(remaining, 0.5))
        if not ready and proc.poll() is not None and sys.platform.startswith("linux"):
            _kill_marked(token)  # the reaper is gone, yet something holds its output open
        for key, _ in ready:
            chunk = os.read(key.fd, 65536)
            if not chunk:
                selector.unregister(key.fileobj)
                open_streams -= 1
                continue
            key.data.extend(chunk)
            if key.data is err and len(err) > STDERR_KEEP:
                del err[: len(err) - STDERR_KEEP]
        if len(out) > max_output:
            problem = f"wrote more than {max_output} bytes to stdout; the process and its descendants were killed"
            break
    selector.close()
    if problem is not None:
        _stop(proc)
        return Completed(bytes(out[:max_output]), bytes(err), None, problem, time.monotonic() - start)
    try:
        code = proc.wait(max(0.1, timeout - (time.monotonic() - start)))
    except subprocess.TimeoutExpired:
        _stop(proc)
        return Completed(bytes(out), bytes(err), None, f"timed out after {timeout:g} s; the process and its descendants were killed",
                         time.monotonic() - start)
    # children that outlived the agent are not left behind (the reaper took the rest)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if code == CANNOT_START and sys.platform.startswith("linux") and err.startswith(b"cannot start "):
        return Completed(b"", bytes(err), None, err.decode("utf-8", "replace").strip(), time.monotonic() - start)
    return Completed(bytes(out), bytes(err), code, None, time.monotonic() - start)
