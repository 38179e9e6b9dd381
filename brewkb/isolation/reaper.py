"""Run a program and, when it exits, kill everything it started.

Usage: ``python -I -S reaper.py [--in-namespace] ARGV...`` (Linux);
``--in-namespace`` when it runs in a PID namespace whose init is its parent. The reaper makes itself a
*child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``), so every orphaned
descendant of the program — double-forked, ``setsid``, in another process
group — is re-parented to it rather than to init. When the program exits, or
when the reaper receives SIGTERM (a timeout) or its parent dies, it kills its
children with SIGKILL, reaps them, kills what they leave to it, and so on until
no descendant is left; then it exits with the program's status. Once it has
exited nothing holds the program's stdout or stderr any more.

This file is run as a script: it imports nothing from brewkb, so it starts fast.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
CANNOT_START = 127


def _children() -> list[int]:
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()  # the command name may hold spaces and parentheses
        if len(fields) > 1 and int(fields[1]) == me:
            found.append(int(entry))
    return found


def _kill_descendants() -> None:
    while True:
        for pid in _children():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def main(argv: list[str]) -> int:
    # in a PID namespace the parent is the namespace's init, pid 1: that is no sign of an orphan
    orphan_parent = 0 if argv[:1] == ["--in-namespace"] else 1
    argv = argv[1:] if orphan_parent == 0 else argv
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    try:
        agent = subprocess.Popen(argv)
    except OSError as exc:
        print(f"cannot start {argv[0]!r}: {exc.strerror}", file=sys.stderr)
        return CANNOT_START

    def stop(signum: int, frame: object) -> None:
        try:
            agent.kill()
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGTERM, stop)
    if os.getppid() == orphan_parent:  # the parent died before the death signal was armed
        stop(signal.SIGTERM, None)
    while True:  # reap orphans as they come, until the program itself exits
        pid, status = os.waitpid(-1, 0)
        if pid == agent.pid:
            break
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the program is gone; finish the clean-up
    _kill_descendants()
    if os.WIFSIGNALED(status):
        if os.WTERMSIG(status) not in (signal.SIGKILL, signal.SIGSTOP):  # those cannot be caught anyway
            signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
