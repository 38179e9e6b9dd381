"""Refs: read them, move them with git's lock-file protocol and a
compare-and-swap on the old value, list, delete and push them."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from brewkb.errors import GitError, RefConflictError

__all__ = ["RefDB", "ANY"]


class _Any:
    def __repr__(self) -> str:
        return "ANY"


ANY: Any = _Any()
"""``expected`` value of ``update_ref`` that skips the compare-and-swap."""



class RefDB:
    """The refs of one repository (a part of ``GitStore``)."""

    common_dir: Path
    _cwd: Path
    """Where git commands run: the working tree, or the git folder of a bare repository."""
    _ref_dirs: set[str]
    """Ref folders known to exist (a search creates a ref for every node: plain strings and os calls)."""
    _packed: tuple[tuple[int, int, int], dict[str, str]] | None
    """``packed-refs`` as last parsed, with the (inode, size, mtime) it had."""

    def _packed_refs(self) -> dict[str, str]:
        path = f"{self.common_dir}/packed-refs"
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            return {}
        # git rewrites packed-refs through a lock file and a rename: a new inode each time
        signature = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if self._packed is not None and self._packed[0] == signature:
            return self._packed[1]
        found: dict[str, str] = {}
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            return found
        for line in text.splitlines():
            if line and line[0] not in "#^":
                sha, _, name = line.partition(" ")
                found[name] = sha
        self._packed = (signature, found)
        return found

    def read_ref(self, name: str) -> str | None:
        """The commit a ref points at, or ``None``. Follows one level of symref."""
        try:
            with open(f"{self.common_dir}/{name}", encoding="utf-8") as f:
                value = f.read().strip()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return self._packed_refs().get(name)
        if value.startswith("ref: "):
            return self.read_ref(value[5:])
        return value

    def update_ref(self, name: str, new: str, expected: str | None | _Any = ANY) -> None:
        """Point ``name`` at ``new`` if it currently points at ``expected``
        (``None``: the ref must not exist). Uses git's ``.lock`` protocol, so a
        concurrent brewkb or git process either waits its turn or is refused."""
        if not name.startswith("refs/") or ".." in name or name.endswith((".lock", "/")):
            raise GitError(f"{name!r} is not a valid ref name")
        path = f"{self.common_dir}/{name}"
        lock = path + ".lock"
        self._ref_folder(os.path.dirname(path), name)
        if os.path.isdir(path):
            raise _clash(name)
        try:
            try:
                fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except (FileNotFoundError, NotADirectoryError):  # its folder was removed (or replaced) since
                self._ref_dirs.discard(os.path.dirname(path))
                self._ref_folder(os.path.dirname(path), name)
                fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            raise RefConflictError(
                f"{name} is locked by another process ({lock} exists); retry, or delete the "
                "lock file if no git process is running"
            ) from None
        try:
            current = self.read_ref(name)
            if expected is not ANY and current != expected:
                raise RefConflictError(
                    f"{name} moved: expected {expected or 'no ref'}, found {current or 'no ref'}; "
                    "another process updated it — reload and retry"
                )
            line = (new + "\n").encode()
            if os.write(fd, line) != len(line):  # a full disk: the ref keeps its old value
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(lock))
            os.close(fd)
            fd = -1
            os.replace(lock, path)
        except BaseException as exc:
            if fd >= 0:
                os.close(fd)
            try:
                os.unlink(lock)
            except FileNotFoundError:
                pass
            if isinstance(exc, OSError) and exc.filename is None and exc.errno is not None:
                raise OSError(exc.errno, exc.strerror, str(path)) from None
            raise

    def _ref_folder(self, folder: str, name: str) -> None:
        if folder in self._ref_dirs:
            return
        try:
            os.makedirs(folder, exist_ok=True)
        except (NotADirectoryError, FileExistsError):
            raise _clash(name) from None
        self._ref_dirs.add(folder)

    def _git(self, *args: str, stdin: str | None = None) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=self._cwd, input=stdin, capture_output=True,
                text=True, check=True,
            ).stdout
        except subprocess.CalledProcessError as exc:
            said = exc.stderr.strip()
            hint = "; free some space and run the command again" if "No space left" in said else ""
            raise GitError(f"git {' '.join(args)} failed: {said}{hint}") from None

    def list_refs(self, prefix: str) -> dict[str, str]:
        """Refs under ``prefix`` (e.g. ``refs/heads/brew/run1/``) and their commits."""
        out = self._git("for-each-ref", "--format=%(objectname) %(refname)", prefix)
        return {name: sha for sha, _, name in (line.partition(" ") for line in out.splitlines())}

    def push(self, remote: str, refspecs: Sequence[str]) -> str:
        """``git push REMOTE REFSPEC...`` (explicit refspecs only); returns git's report."""
        if not refspecs:
            raise GitError("nothing to push")
        self._check_remote(remote)
        try:  # `--`: whatever the remote says, git reads it as a repository, never as an option
            done = subprocess.run(["git", "push", "--porcelain", "--", remote, *refspecs], cwd=self._cwd,
                                  capture_output=True, text=True, check=True)
        except subprocess.CalledProcessError as exc:
            said = next((line.removeprefix("fatal: ") for line in exc.stderr.splitlines()
                         if line.startswith(("fatal:", "error:"))), exc.stderr.strip())
            raise GitError(f"git push {remote} failed: {said}; check the remote's URL and your "
                           "permission to push") from None
        return done.stdout

    def _check_remote(self, remote: str) -> None:
        """A remote is a configured remote's name, a URL or a path, never an option or a line break."""
        if not remote.strip() or remote.startswith("-") or any(ord(c) < 32 or ord(c) == 127 for c in remote):
            raise GitError(f"{remote!r} is not a remote: pass a remote's name (`git remote` lists them) or a URL")
        if remote in self._git("remote").split():
            return
        if not any(c in remote for c in "/:\\") and not (self._cwd / remote).exists():
            raise GitError(f"no remote {remote!r}: git remote add {remote} URL (or pass the URL itself)")

    def clear_locks(self, prefix: str) -> list[Path]:
        """Delete the ``.lock`` files under the refs folder ``prefix`` (e.g.
        ``refs/heads/brew/run1/``) and return them. Only for a caller that
        knows no other process writes those refs (it holds the run's lock):
        such a lock was left by a killed process."""
        folder = self.common_dir / prefix
        found = sorted(folder.rglob("*.lock")) if folder.is_dir() else []
        for lock in found:
            lock.unlink(missing_ok=True)
        return found

    def delete_refs(self, refs: Mapping[str, str]) -> int:
        """Delete refs (name → the commit it must still point at) in one transaction."""
        if not refs:
            return 0
        script = "".join(f"delete {name} {sha}\n" for name, sha in refs.items())
        self._git("update-ref", "--stdin", stdin=script)
        return len(refs)


def _clash(name: str) -> GitError:
    return GitError(f"cannot create {name}: a ref with a conflicting name exists "
                    "(git cannot have both `a/b` and `a/b/c`)")
