"""Run an external program safely: argv (never a shell), JSON on stdin, output
capped, a deadline, and no process left behind.

On Linux the program runs under ``reaper.py``, a child subreaper that kills every
descendant when the program exits or the deadline passes — including ones that
left the process group with ``setsid`` — so a child that still holds stdout
cannot keep a finished program's output waiting. The reaper itself runs in a
PID namespace of its own (bubblewrap's ``--unshare-pid``): when the reaper ends,
however it ends, the namespace's init ends and the kernel kills every process
left in it, so a program that kills its reaper, detaches and clears its
environment still ends with its episode. Where the kernel or a missing
bubblewrap refuses a namespace, brewkb says so once and falls back to marking
the environment of everything it starts with a token of its own
(``BREWKB_EPISODE``): when the reaper is gone every process still carrying the
token is killed (a process that clears its environment escapes that). Elsewhere
the process group is killed.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Completed", "run_capped", "stop_all", "namespace_problem"]

log = logging.getLogger(__name__)

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


NAMESPACE = ("--dev-bind", "/", "/", "--unshare-pid", "--die-with-parent", "--proc", "/proc", "--")
"""bwrap options that change nothing but the PID namespace (and the /proc that shows it)."""


@functools.lru_cache(maxsize=1)
def namespace_problem() -> str:
    """Why programs cannot run in a PID namespace of their own here, or ``""``
    when they can (tried once per process)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap is not installed (apt-get install -y bubblewrap)"
    try:
        done = subprocess.run([bwrap, *NAMESPACE, "true"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap cannot run: {exc}"
    said = done.stderr.decode("utf-8", "replace").strip().splitlines()
    return "" if done.returncode == 0 else f"bwrap: {said[-1] if said else f'exit status {done.returncode}'}"


def _contained(argv: Sequence[str], namespace: bool) -> tuple[list[str], bool]:
    """The command line that runs ``argv`` under the reaper, in a PID
    namespace when asked and possible; and whether it is in one."""
    if not sys.platform.startswith("linux"):
        return list(argv), False
    reaper = [sys.executable, "-I", "-S", str(REAPER)]
    if namespace:
        problem = namespace_problem()
        if not problem:
            return [shutil.which("bwrap") or "bwrap", *NAMESPACE, *reaper, "--in-namespace", *argv], True
        _warn_once(problem)
    return [*reaper, *argv], False


_WARNED: set[str] = set()
_WARNED_LOCK = threading.Lock()


def _warn_once(problem: str) -> None:
    """Warn of ``problem`` once per process, however many episodes start at
    the same time (``lru_cache`` would let two concurrent first calls both warn)."""
    with _WARNED_LOCK:
        if problem in _WARNED:
            return
        _WARNED.add(problem)
    log.warning("agent programs do not run in a PID namespace of their own here (%s); each episode's processes "
                "are ended by its reaper and an environment marker instead, which a process that kills the reaper "
                "and clears its environment escapes (see docs/agent-protocol.md)", problem)


def run_capped(argv: Sequence[str], stdin: bytes, *, timeout: float, max_output: int,
               cwd: Path | None = None, env: Mapping[str, str] | None = None, namespace: bool = True) -> Completed:
    """Run ``argv`` with ``stdin``; kill it and all its descendants at ``timeout``
    seconds or when stdout exceeds ``max_output`` bytes, and its descendants
    anyway when it exits. ``namespace``: in a PID namespace of its own (a
    caller whose program makes its own, like the sandbox, passes ``False``)."""
    start = time.monotonic()
    token = secrets.token_hex(8)
    command, isolated = _contained(argv, namespace)
    try:
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=cwd, env={**(os.environ if env is None else env), TOKEN_VAR: token},
                                start_new_session=True)
    except OSError as exc:
        return Completed(b"", b"", None, f"cannot start {argv[0]!r}: {exc.strerror}", 0.0)
    _LIVE.add(proc)
    try:
        done = _collect(proc, stdin, start, timeout, max_output, token)
        code = done.returncode
        if isolated and code is not None and 128 < code <= 128 + 64:
            # bwrap reports a child killed by a signal as 128 + the signal, as a shell does
            done = Completed(done.stdout, done.stderr, -(code - 128), done.problem, done.seconds)
        return done
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
