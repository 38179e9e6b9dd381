"""The one object that talks to a KB repository: ``GitStore``.

Everything a search writes goes straight into the object database: blobs,
trees and commits are written in-process, as loose objects or, a batch at a
time (``packed()``), as one pack; refs are moved with git's own lock-file
protocol and a compare-and-swap on the old value, never before the objects
they name are on disk; and notes are written in batches (many nodes, one
notes commit). Nothing here reads or
writes the working tree or the index. Reading uses GitPython's persistent
``git cat-file --batch`` process.

Foreign exceptions are translated into ``brewkb.errors.GitError`` subclasses.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import git
from gitdb.exc import BadName, BadObject

from brewkb.errors import GitError, NotARepoError
from brewkb.git.notes import Notes
from brewkb.git.objects import FILE_MODE, Entry, Identity, blob_id, format_message, parse_trailers
from brewkb.git.refdb import ANY
from brewkb.git.refs import PREFIX, refs_of_kind

__all__ = ["GitStore", "Entry", "Identity", "format_message", "parse_trailers", "blob_id", "ANY", "FILE_MODE"]


class GitStore(Notes):
    """A KB repository (working tree or bare): its objects, refs and notes."""

    def __init__(self, path: Path | str, *, search_parent: bool = True) -> None:
        path = Path(path)
        if not path.exists():
            raise GitError(f"{path}: no such folder")
        try:
            self._repo = git.Repo(path, search_parent_directories=search_parent)
        except git.InvalidGitRepositoryError:
            raise NotARepoError(
                f"{path.resolve()} is not inside a git repository; run `brewkb init` there"
            ) from None
        except git.NoSuchPathError:
            raise GitError(f"{path}: no such folder") from None
        if self._repo.config_reader().get_value("extensions", "objectformat", "sha1") != "sha1":
            raise GitError(f"{path}: SHA-256 repositories are not supported yet; use a SHA-1 repo")
        self.git_dir = Path(self._repo.git_dir)
        self.common_dir = Path(self._repo.common_dir)
        self._cwd = Path(self._repo.working_tree_dir or self.git_dir)
        self._objects_str = str(self.common_dir / "objects")
        self._folders: set[str] = set()
        self._written: set[str] = set()
        self._trees: dict[str, list[Entry]] = {}
        self._names: dict[str, dict[str, Entry]] = {}
        self._identity: tuple[str, str] | None = None
        self._pending: dict[str, tuple[str, bytes]] = {}
        self._packing = 0
        self._ref_dirs: set[str] = set()
        self._packed: tuple[tuple[int, int, int], dict[str, str]] | None = None

    @classmethod
    def init(cls, path: Path) -> GitStore:
        """``git init`` a new repository at ``path`` (with ``main`` as its branch)."""
        try:
            git.Repo.init(path, initial_branch="main").close()
        except git.GitCommandError as exc:
            raise GitError(f"git init {path} failed: {exc.stderr.strip()}") from None
        return cls(path, search_parent=False)

    def commit_all(self, message: str) -> str:
        """Stage every file of the working tree and commit it on the current
        branch, as a person would with ``git add -A && git commit``. Only for
        repositories brewkb just created (``brewkb demo``)."""
        who = self.identity(0)
        self._git("add", "-A")
        self._git("-c", f"user.name={who.name}", "-c", f"user.email={who.email}", "commit", "-q", "-m", message)
        return self.head_commit()

    def commit_paths(self, paths: Sequence[str], message: str) -> str:
        """Commit exactly ``paths`` (relative to the working tree) on the current
        branch, leaving anything else the user staged alone."""
        who = self.identity(0)
        self._git("add", "--", *paths)
        self._git("-c", f"user.name={who.name}", "-c", f"user.email={who.email}", "commit", "-q", "-m", message,
                  "--only", "--", *paths)
        return self.head_commit()

    def uncommitted(self, paths: Sequence[str]) -> list[tuple[str, str]]:
        """``(path, state)`` of each file under ``paths`` whose working-tree content is not ``HEAD``'s:
        ``untracked``, ``deleted`` or ``changed`` (staged or not)."""
        if self.work_tree is None:
            return []
        fields = iter(self._git("status", "--porcelain", "-z", "--untracked-files=all", "--", *paths).split("\0"))
        found = []
        for entry in fields:
            if len(entry) < 4:
                continue
            code, path = entry[:2], entry[3:]
            if "R" in code or "C" in code:
                next(fields, None)  # the name it had
            found.append((path, "untracked" if code == "??" else "deleted" if "D" in code else "changed"))
        return found

    # ------------------------------------------------------------------ basics
    @property
    def is_bare(self) -> bool:
        return bool(self._repo.bare)

    @property
    def work_tree(self) -> Path | None:
        return None if self.is_bare else Path(self._repo.working_tree_dir or "")

    def require_work_tree(self) -> Path:
        if self.work_tree is None:
            raise GitError(
                f"{self.git_dir} is a bare repository and has no working tree; pass --rev "
                "to read a revision, or run this in a clone"
            )
        return self.work_tree

    def relpath(self, path: Path) -> str:
        """``path`` relative to the working tree, as git spells it; refuses paths outside."""
        root = self.require_work_tree().resolve()
        full = path.resolve() if path.is_absolute() else (Path.cwd() / path).resolve()
        try:
            return full.relative_to(root).as_posix()
        except ValueError:
            raise GitError(f"{path} is outside the repository {root}; pass a path inside it") from None

    def close(self) -> None:
        self.flush_objects()
        self._repo.close()

    def __enter__(self) -> GitStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update_ref(self, name: str, new: str, expected: str | None | Any = ANY) -> None:
        self.flush_objects()  # a ref never names an object that is not on disk yet
        super().update_ref(name, new, expected)

    # ----------------------------------------------------------------- reading
    def resolve(self, rev: str) -> str:
        """Commit id of ``rev`` (a branch, tag, id, ``HEAD~2``...)."""
        self.flush_objects()  # GitPython reads through git
        if re.search(r"^[^:]+:(?![^{]*})", rev):  # `REV:PATH` names a file of a commit (`:/text` and `@{…}` are commits)
            raise GitError(f"{rev[:200]!r} names a path inside a revision, not a commit: give a branch, tag or commit "
                           "without `:PATH`")
        try:
            obj = self._repo.rev_parse(rev)
            while obj.type == "tag":
                obj = obj.object
        except (BadName, BadObject, ValueError, git.GitCommandError, IndexError, KeyError):
            pr = [ref.short for ref, _ in refs_of_kind(self.list_refs(PREFIX), "pr")]
            raise GitError(f"unknown revision {rev!r}: give a branch, tag or commit of this KB"
                           + (f" (the runs' PR branches: {', '.join(pr)})" if pr else "")) from None
        if obj.type != "commit":
            raise GitError(f"{rev!r} names a {obj.type}, not a commit")
        return obj.hexsha

    def head_commit(self) -> str:
        try:
            return self._repo.head.commit.hexsha
        except ValueError:
            raise GitError("the repository has no commits yet; commit brewkb.toml and recipes/ first "
                           "(git add -A && git commit -m 'Start a brewkb KB')") from None

    def head_branch(self) -> str:
        """The checked-out branch name; refuses a detached HEAD."""
        if self._repo.head.is_detached:
            raise GitError("HEAD is detached; check out a branch or name a base revision with --base")
        return self._repo.active_branch.name
