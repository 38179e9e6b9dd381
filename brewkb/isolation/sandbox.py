"""Run untrusted Python inside bubblewrap (``bwrap``, Debian package ``bubblewrap``).

What the code inside sees and may do:

- a fresh, empty root file system; read-only binds of ``/usr`` (and the ``/bin``,
  ``/lib*``, ``/sbin`` links of a merged-/usr system), ``/etc/ld.so.cache`` and the
  Python installation that runs brewkb (``sys.base_prefix`` and the virtualenv) —
  nothing else of the host, no ``/etc``, no home folder, no ``/sys``;
- one writable folder, ``/job``: a private folder holding a private copy of the
  input; a private ``/tmp``;
- new PID, network, IPC, UTS and cgroup namespaces: no view of other processes
  (``/proc`` shows only the sandbox), no network interface but an unconfigured
  loopback;
- an environment of exactly ``INPUT_PATH`` and ``OUTPUT_PATH``;
- resource limits set before the code runs: address space, CPU seconds, number of
  processes, size of a written file, no core dumps; stdout and stderr are capped by
  the caller;
- when the code's main process ends or the caller kills the sandbox, the PID
  namespace's init dies and the kernel kills every process left in it (double-forked
  and ``setsid`` ones included).

When brewkb runs as root the sandbox drops to an unprivileged user id of its own
(``setpriv``), so the process limit holds; otherwise bwrap creates a user namespace.
``mode="none"`` runs the code as a plain subprocess with the same limits but no
isolation; callers must record that choice.
"""

from __future__ import annotations

import functools
import itertools
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from brewkb.errors import ConfigError
from brewkb.isolation.subproc import Completed, run_capped

__all__ = ["INSTALL_HINT", "Limits", "MODES", "check_mode", "run_python"]

MODES = ("bwrap", "none")
INSTALL_HINT = "apt-get install -y bubblewrap"
JOB = "/job"
_uids = itertools.count()

RUNNER = ("import resource, runpy, sys\n"
          "memory, cpu, procs, fsize = (int(a) for a in sys.argv[2:6])\n"
          "for what, value in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_CPU, cpu),\n"
          "                    (resource.RLIMIT_NPROC, procs), (resource.RLIMIT_FSIZE, fsize),\n"
          "                    (resource.RLIMIT_CORE, 0)):\n"
          "    resource.setrlimit(what, (value, value))\n"
          "sys.argv = sys.argv[1:2]\n"
          "runpy.run_path(sys.argv[0], run_name='__main__')\n")


@dataclass(frozen=True)
class Limits:
    """What one call may use: wall-clock seconds (also the CPU-second limit),
    address space, processes (the code's own included), the size of any file it
    writes, and bytes of stdout kept."""

    timeout: float = 60.0
    memory_mb: int = 2048
    processes: int = 64
    file_mb: int = 256
    max_output: int = 200_000


def check_mode(mode: str) -> None:
    """Refuse an unknown mode, or ``bwrap`` where it is not installed or cannot
    create its namespaces here (tried once per process)."""
    if mode not in MODES:
        raise ConfigError(f"env.options.sandbox: expected one of {', '.join(MODES)}, got {mode!r}")
    if mode == "bwrap" and shutil.which("bwrap") is None:
        raise ConfigError(f"run_python needs bubblewrap to isolate agent code: {INSTALL_HINT} (or set "
                          "env.options.sandbox = \"none\" to run it without isolation)")
    if mode == "bwrap":
        problem = _probe(shutil.which("bwrap") or "bwrap")
        if problem:
            raise ConfigError(f"bubblewrap cannot create a sandbox here ({problem}); allow user namespaces "
                              "(sysctl kernel.unprivileged_userns_clone=1) or run brewkb as root, or set "
                              "env.options.sandbox = \"none\" to run agent code without isolation")


@functools.lru_cache(maxsize=4)
def _probe(bwrap: str) -> str:
    """bwrap's complaint when a sandbox like the real one cannot start, else ``""``."""
    with tempfile.TemporaryDirectory(prefix="brewkb-probe-") as tmp:
        done = run_capped(_argv("bwrap", Path(JOB), ("i", "o"), Limits(), Path(tmp), ["/usr/bin/true"]), b"",
                          timeout=60, max_output=10_000, env={}, namespace=False)
    if done.returncode == 0:
        return ""
    lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
    return done.problem or (lines[-1] if lines else f"exit status {done.returncode}")


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    return args + ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]


def _python_binds() -> list[str]:
    args: list[str] = []
    made: set[str] = set()
    for prefix in dict.fromkeys((os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix))):
        if prefix == "/usr" or prefix.startswith("/usr/"):
            continue
        for parent in reversed(Path(prefix).parents[:-1]):  # traversable by the sandbox's user
            if str(parent) not in made:
                made.add(str(parent))
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", prefix, prefix]
    return args


def _argv(mode: str, folder: Path, names: tuple[str, str], limits: Limits, work: Path,
          command: list[str] | None = None) -> list[str]:
    """``folder`` is where ``work`` is seen by the code; ``names`` are the input's and the output's;
    ``command`` replaces the Python runner (the probe runs ``true``)."""
    runner = command or [sys.executable, "-I", "-c", RUNNER, str(folder / "solution.py"), str(limits.memory_mb * 1024 * 1024),
              str(max(1, int(limits.timeout + 0.999))), str(limits.processes), str(limits.file_mb * 1024 * 1024)]
    if mode == "none":
        return runner
    args = [shutil.which("bwrap") or "bwrap", "--die-with-parent", "--new-session", "--clearenv",
            "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
            "--perms", "1777", "--tmpfs", "/tmp", *_system_binds(), *_python_binds(),
            "--bind", str(work), JOB, "--proc", "/proc", "--dev", "/dev", "--chdir", JOB,
            "--setenv", "INPUT_PATH", f"{JOB}/{names[0]}", "--setenv", "OUTPUT_PATH", f"{JOB}/{names[1]}"]
    if os.geteuid() == 0:
        # root is exempt from the process limit: run the code as a user id of its own
        uid = 200_000 + (os.getpid() * 1000 + next(_uids)) % 100_000
        _chown_tree(work, uid)
        return [*args, "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "/usr/bin/setpriv",
                f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all", "--no-new-privs",
                *runner]
    return [*args, "--unshare-user", *runner]


def _chown_tree(folder: Path, uid: int) -> None:
    os.chown(folder, uid, uid)
    for path in folder.rglob("*"):
        os.lchown(path, uid, uid)


def run_python(code: str, work: Path, input_name: str, *, mode: str, limits: Limits) -> Completed:
    """Run ``code`` with the working folder ``work`` (which holds ``input_name``)
    as its only writable place; ``OUTPUT_PATH`` is ``work/output<suffix of the input>``.

    Inside the sandbox the folder is ``/job``; without one (``mode="none"``) the
    paths are the host's."""
    check_mode(mode)
    (work / "solution.py").write_text(code, encoding="utf-8")
    names = (input_name, f"output{Path(input_name).suffix}")
    if mode == "none":
        env = {"INPUT_PATH": str(work / names[0]), "OUTPUT_PATH": str(work / names[1])}
        return run_capped(_argv(mode, work, names, limits, work), b"", timeout=limits.timeout,
                          max_output=limits.max_output, cwd=work, env=env, namespace=False)
    return run_capped(_argv(mode, Path(JOB), names, limits, work), b"", timeout=limits.timeout,
                      max_output=limits.max_output, env={}, namespace=False)
