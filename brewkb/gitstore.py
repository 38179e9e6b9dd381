"""The one module that talks to git.

Everything a search writes goes straight into the object database: blobs,
trees and commits are written as loose objects in-process, refs are moved with
git's own lock-file protocol and a compare-and-swap on the old value, and notes
are written in batches (many nodes, one notes commit). Nothing here reads or
writes the working tree or the index. Reading uses GitPython's persistent
``git cat-file --batch`` process.

Foreign exceptions are translated into ``brewkb.errors.GitError`` subclasses.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git
from gitdb.exc import BadName, BadObject

from brewkb.errors import GitError, MergeConflictError, NotARepoError, RefConflictError
from brewkb.refs import NOTES_REF

__all__ = ["GitStore", "Entry", "Identity", "format_message", "parse_trailers", "blob_id", "ANY"]

FILE_MODE = "100644"
TREE_MODE = "40000"
_HEX40 = re.compile(r"^[0-9a-f]{40}$")


class _Any:
    def __repr__(self) -> str:
        return "ANY"


ANY: Any = _Any()
"""``expected`` value of ``update_ref`` that skips the compare-and-swap."""


@dataclass(frozen=True)
class Entry:
    """One tree entry: ``mode`` as git writes it (``100644``, ``40000``, ...)."""

    mode: str
    name: str
    sha: str

    @property
    def is_tree(self) -> bool:
        return self.mode == TREE_MODE


@dataclass(frozen=True)
class Identity:
    name: str
    email: str
    timestamp: int
    tz: str = "+0000"

    def format(self) -> str:
        return f"{self.name} <{self.email}> {self.timestamp} {self.tz}"


def format_message(subject: str, body: str = "", trailers: Mapping[str, str] | None = None) -> str:
    """A commit message: subject, optional body, then ``Key: value`` trailers."""
    parts = [subject.strip()]
    if body.strip():
        parts.append(body.strip())
    if trailers:
        parts.append("\n".join(f"{k}: {v}" for k, v in trailers.items()))
    return "\n\n".join(parts) + "\n"


def parse_trailers(message: str) -> dict[str, str]:
    """The trailers of the last paragraph of a commit message."""
    last = message.strip().split("\n\n")[-1]
    found = {}
    for line in last.splitlines():
        match = re.match(r"^([A-Za-z0-9-]+): (.*)$", line)
        if not match:
            return {}
        found[match.group(1)] = match.group(2)
    return found


def blob_id(data: bytes) -> str:
    """The id git gives a blob of ``data``."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _tree_sort_key(entry: Entry) -> bytes:
    name = entry.name.encode()
    return name + b"/" if entry.is_tree else name


def _format_tree(entries: Iterable[Entry]) -> bytes:
    return b"".join(
        e.mode.encode() + b" " + e.name.encode() + b"\0" + bytes.fromhex(e.sha)
        for e in sorted(entries, key=_tree_sort_key)
    )


def _parse_tree(data: bytes) -> list[Entry]:
    entries, pos = [], 0
    while pos < len(data):
        space = data.index(b" ", pos)
        nul = data.index(b"\0", space)
        sha = data[nul + 1 : nul + 21].hex()
        entries.append(Entry(data[pos:space].decode(), data[space + 1 : nul].decode(), sha))
        pos = nul + 21
    return entries


def _note_paths(commit: str) -> tuple[str, ...]:
    """Where git may keep the note of ``commit``: flat or with 1 or 2 fan-out levels."""
    return (commit, f"{commit[:2]}/{commit[2:]}", f"{commit[:2]}/{commit[2:4]}/{commit[4:]}")


class GitStore:
    """A KB repository (working tree or bare)."""

    def __init__(self, path: Path | str, *, search_parent: bool = True) -> None:
        path = Path(path)
        if not path.exists():
            raise GitError(f"{path}: no such folder")
        try:
            self._repo = git.Repo(path, search_parent_directories=search_parent)
        except git.InvalidGitRepositoryError:
            raise NotARepoError(
                f"{path.resolve()} is not inside a git repository; run `brewkb init` there "
                "(or `git init`)"
            ) from None
        except git.NoSuchPathError:
            raise GitError(f"{path}: no such folder") from None
        if self._repo.config_reader().get_value("extensions", "objectformat", "sha1") != "sha1":
            raise GitError(f"{path}: SHA-256 repositories are not supported yet; use a SHA-1 repo")
        self.git_dir = Path(self._repo.git_dir)
        self.common_dir = Path(self._repo.common_dir)
        self._objects_str = str(self.common_dir / "objects")
        self._folders: set[str] = set()
        self._written: set[str] = set()
        self._trees: dict[str, list[Entry]] = {}
        self._identity: tuple[str, str] | None = None

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
        self._repo.close()

    def __enter__(self) -> GitStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- reading
    def resolve(self, rev: str) -> str:
        """Commit id of ``rev`` (a branch, tag, id, ``HEAD~2``...)."""
        try:
            obj = self._repo.rev_parse(rev)
            while obj.type == "tag":
                obj = obj.object
        except (BadName, BadObject, ValueError, git.GitCommandError, IndexError):
            raise GitError(f"unknown revision {rev!r}; check it with `git log --oneline {rev}`") from None
        if obj.type != "commit":
            raise GitError(f"{rev!r} names a {obj.type}, not a commit")
        return obj.hexsha

    def head_commit(self) -> str:
        try:
            return self._repo.head.commit.hexsha
        except ValueError:
            raise GitError("the repository has no commits yet; commit your recipes first") from None

    def head_branch(self) -> str:
        """The checked-out branch name; refuses a detached HEAD."""
        if self._repo.head.is_detached:
            raise GitError("HEAD is detached; check out a branch or name a base revision with --base")
        return self._repo.active_branch.name

    def read_raw(self, sha: str) -> tuple[str, bytes]:
        try:
            stream = self._repo.odb.stream(bytes.fromhex(sha))
        except (BadObject, ValueError, git.GitCommandError) as exc:
            raise GitError(f"object {sha} is missing from the repository: {exc}") from None
        return stream.type.decode() if isinstance(stream.type, bytes) else stream.type, stream.read()

    def read_blob(self, sha: str) -> bytes:
        return self.read_raw(sha)[1]

    def read_tree(self, sha: str) -> list[Entry]:
        cached = self._trees.get(sha)
        if cached is None:
            kind, data = self.read_raw(sha)
            if kind != "tree":
                raise GitError(f"object {sha} is a {kind}, not a tree")
            cached = self._trees[sha] = _parse_tree(data)
        return cached

    def commit_tree(self, commit: str) -> str:
        return self.read_commit(commit)["tree"][0]

    def read_commit(self, commit: str) -> dict[str, list[str]]:
        """Headers of a commit (``tree``, ``parent``...) and its ``message``."""
        kind, data = self.read_raw(commit)
        if kind != "commit":
            raise GitError(f"object {commit} is a {kind}, not a commit")
        head, _, message = data.decode("utf-8", "replace").partition("\n\n")
        fields: dict[str, list[str]] = {"parent": []}
        for line in head.splitlines():
            key, _, value = line.partition(" ")
            if key and not line.startswith(" "):
                fields.setdefault(key, []).append(value)
        fields["message"] = [message]
        return fields

    def read_many(self, names: Sequence[str]) -> list[bytes | None]:
        """The contents of many objects, named by id or ``rev:path``, through
        one ``git cat-file --batch`` (``None`` for a name that does not resolve)."""
        if not names:
            return []
        if any("\n" in n for n in names):
            raise GitError("object names cannot contain newlines")
        try:
            out = subprocess.run(["git", "cat-file", "--batch"], cwd=self.git_dir, capture_output=True, check=True,
                                 input="".join(n + "\n" for n in names).encode()).stdout
        except subprocess.CalledProcessError as exc:
            raise GitError(f"git cat-file --batch failed: {exc.stderr.decode(errors='replace').strip()}") from None
        found: list[bytes | None] = []
        pos = 0
        for _ in names:
            end = out.index(b"\n", pos)
            header = out[pos:end].split(b" ")
            pos = end + 1
            if header[-1] == b"missing" or len(header) != 3:
                found.append(None)
                continue
            size = int(header[2])
            found.append(out[pos : pos + size])
            pos += size + 1
        return found

    def lookup(self, tree: str, path: str) -> Entry | None:
        """The entry at ``path`` (``a/b/c.md``) under ``tree``, or ``None``."""
        parts = [p for p in path.split("/") if p]
        entry: Entry | None = Entry(TREE_MODE, "", tree)
        for part in parts:
            if entry is None or not entry.is_tree:
                return None
            entry = next((e for e in self.read_tree(entry.sha) if e.name == part), None)
        return entry

    def read_folder(self, commit: str, folder: str, suffix: str = ".md") -> dict[str, bytes]:
        """Files directly in ``folder`` at ``commit`` whose name ends in ``suffix``,
        keyed by their path in the repository."""
        entry = self.lookup(self.commit_tree(commit), folder)
        if entry is None or not entry.is_tree:
            return {}
        prefix = folder.strip("/")
        return {
            f"{prefix}/{e.name}" if prefix else e.name: self.read_blob(e.sha)
            for e in self.read_tree(entry.sha)
            if not e.is_tree and e.name.endswith(suffix)
        }

    # ----------------------------------------------------------------- writing
    def _write_object(self, kind: str, data: bytes) -> str:
        raw = f"{kind} {len(data)}\0".encode() + data
        sha = hashlib.sha1(raw).hexdigest()
        if sha in self._written:
            return sha
        # plain strings and os calls: this runs for every object a search writes
        folder = f"{self._objects_str}/{sha[:2]}"
        target = f"{folder}/{sha[2:]}"
        if not os.path.exists(target):
            if folder not in self._folders:
                os.makedirs(folder, exist_ok=True)
                self._folders.add(folder)
            tmp = f"{folder}/tmp_obj_{os.getpid()}_{sha[2:]}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o444)
            try:
                os.write(fd, zlib.compress(raw, 1))
            finally:
                os.close(fd)
            os.replace(tmp, target)
        self._written.add(sha)
        return sha

    def write_blob(self, data: bytes) -> str:
        return self._write_object("blob", data)

    def write_tree(self, entries: Iterable[Entry]) -> str:
        entries = list(entries)
        sha = self._write_object("tree", _format_tree(entries))
        self._trees.setdefault(sha, sorted(entries, key=_tree_sort_key))
        return sha

    def update_tree(self, base_tree: str | None, changes: Mapping[str, Entry | None]) -> str:
        """A new tree: ``base_tree`` with each path set to an entry (its ``name``
        is ignored) or removed (``None``). Only the touched subtrees are rewritten."""
        by_head: dict[str, dict[str, Entry | None]] = {}
        direct: dict[str, Entry | None] = {}
        for path, entry in changes.items():
            head, _, rest = path.strip("/").partition("/")
            if rest:
                by_head.setdefault(head, {})[rest] = entry
            else:
                direct[head] = entry
        current = {e.name: e for e in (self.read_tree(base_tree) if base_tree else [])}
        for name, entry in direct.items():
            if entry is None:
                current.pop(name, None)
            else:
                current[name] = Entry(entry.mode, name, entry.sha)
        for head, sub in by_head.items():
            old = current.get(head)
            subtree = self.update_tree(old.sha if old is not None and old.is_tree else None, sub)
            if self.read_tree(subtree):
                current[head] = Entry(TREE_MODE, head, subtree)
            else:
                current.pop(head, None)
        return self.write_tree(current.values())

    def replace_file(self, base_tree: str, path: str, data: bytes) -> str:
        """``base_tree`` with the file at ``path`` set to ``data``."""
        return self.update_tree(base_tree, {path: Entry(FILE_MODE, "", self.write_blob(data))})

    def identity(self, timestamp: int) -> Identity:
        if self._identity is None:
            # as git does: the environment, then the repository's config, then a default
            reader = self._repo.config_reader()
            self._identity = (
                os.environ.get("GIT_COMMITTER_NAME") or str(reader.get_value("user", "name", "brewkb")),
                os.environ.get("GIT_COMMITTER_EMAIL") or str(reader.get_value("user", "email", "brewkb@localhost")),
            )
        return Identity(*self._identity, timestamp=timestamp)

    def write_commit(
        self, tree: str, parents: Iterable[str], message: str, *, timestamp: int,
        author: Identity | None = None,
    ) -> str:
        """A commit object; ``timestamp`` is explicit so runs can be reproducible."""
        who = (author or self.identity(timestamp)).format()
        lines = [f"tree {tree}"] + [f"parent {p}" for p in parents]
        lines += [f"author {who}", f"committer {who}"]
        return self._write_object("commit", ("\n".join(lines) + "\n\n" + message).encode())

    # -------------------------------------------------------------------- refs
    def _packed_refs(self) -> dict[str, str]:
        path = self.common_dir / "packed-refs"
        found: dict[str, str] = {}
        try:
            text = path.read_text()
        except FileNotFoundError:
            return found
        for line in text.splitlines():
            if line and line[0] not in "#^":
                sha, _, name = line.partition(" ")
                found[name] = sha
        return found

    def read_ref(self, name: str) -> str | None:
        """The commit a ref points at, or ``None``. Follows one level of symref."""
        try:
            value = (self.common_dir / name).read_text().strip()
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
        path = self.common_dir / name
        lock = path.with_name(path.name + ".lock")
        clash = GitError(f"cannot create {name}: a ref with a conflicting name exists "
                         "(git cannot have both `a/b` and `a/b/c`)")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except (NotADirectoryError, FileExistsError):
            raise clash from None
        if path.is_dir():
            raise clash
        try:
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
            os.write(fd, (new + "\n").encode())
            os.close(fd)
            fd = -1
            os.replace(lock, path)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            lock.unlink(missing_ok=True)
            raise

    def _git(self, *args: str, stdin: str | None = None) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=self.work_tree or self.git_dir, input=stdin, capture_output=True,
                text=True, check=True,
            ).stdout
        except subprocess.CalledProcessError as exc:
            raise GitError(f"git {' '.join(args)} failed: {exc.stderr.strip()}") from None

    def list_refs(self, prefix: str) -> dict[str, str]:
        """Refs under ``prefix`` (e.g. ``refs/heads/brew/run1/``) and their commits."""
        out = self._git("for-each-ref", "--format=%(objectname) %(refname)", prefix)
        return {name: sha for sha, _, name in (line.partition(" ") for line in out.splitlines())}

    def push(self, remote: str, refspecs: Sequence[str]) -> str:
        """``git push REMOTE REFSPEC...`` (explicit refspecs only); returns git's report."""
        if not refspecs:
            raise GitError("nothing to push")
        try:
            done = subprocess.run(["git", "push", "--porcelain", remote, *refspecs], cwd=self.work_tree or self.git_dir,
                                  capture_output=True, text=True, check=True)
        except subprocess.CalledProcessError as exc:
            raise GitError(f"git push {remote} failed: {exc.stderr.strip()}; check the remote's URL and your "
                           "permission to push") from None
        return done.stdout

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

    # ------------------------------------------------------------------- notes
    def _note_entries(self, tree: str, prefix: str = "") -> Iterator[tuple[str, str]]:
        for entry in self.read_tree(tree):
            name = prefix + entry.name
            if entry.is_tree and len(name) < 40:
                yield from self._note_entries(entry.sha, name)
            elif not entry.is_tree and _HEX40.match(name):
                yield name, entry.sha

    def note_blobs(self, ref: str = NOTES_REF) -> dict[str, str]:
        """Annotated commit → note blob id, for every note under ``ref``."""
        head = self.read_ref(ref)
        return dict(self._note_entries(self.commit_tree(head))) if head else {}

    def read_notes(self, ref: str = NOTES_REF) -> dict[str, Any]:
        """Every note under ``ref`` as parsed JSON, keyed by the annotated commit."""
        return {c: self.load_note(c, b) for c, b in self.note_blobs(ref).items()}

    def read_note(self, commit: str, ref: str = NOTES_REF) -> Any | None:
        head = self.read_ref(ref)
        if not head:
            return None
        tree = self.commit_tree(head)
        for path in _note_paths(commit):
            entry = self.lookup(tree, path)
            if entry is not None:
                return self.load_note(commit, entry.sha)
        return None

    def _has_note(self, root: str, commit: str) -> bool:
        return any(self.lookup(root, p) is not None for p in _note_paths(commit))

    def load_note(self, commit: str, blob: str) -> Any:
        try:
            return json.loads(self.read_blob(blob))
        except json.JSONDecodeError:
            raise GitError(f"the note on {commit} is not JSON; fix it with `git notes --ref=brew edit {commit}`") from None

    def add_notes(self, notes: Mapping[str, Any], message: str, *, timestamp: int,
                  ref: str = NOTES_REF, attempts: int = 20) -> str | None:
        """Write JSON notes for many commits as one notes commit. A note is
        written once: annotating a commit that has a note raises ``GitError``.
        Retries when another process moved the notes ref meanwhile."""
        if not notes:
            return None
        blobs = {c: self.write_blob(json.dumps(n, indent=2, sort_keys=True).encode() + b"\n")
                 for c, n in notes.items()}
        for _ in range(attempts):
            head = self.read_ref(ref)
            root = self.commit_tree(head) if head else None
            taken = {c for c in blobs if root and self._has_note(root, c)}
            if taken:
                raise GitError(f"{len(taken)} commit(s) already have a note, e.g. {min(taken)}; "
                               "notes are written once")
            changes = {f"{c[:2]}/{c[2:]}": Entry(FILE_MODE, "", b) for c, b in blobs.items()}
            tree = self.update_tree(root, changes)
            commit = self.write_commit(tree, [head] if head else [], message, timestamp=timestamp)
            try:
                self.update_ref(ref, commit, expected=head)
                return commit
            except RefConflictError:
                continue
        raise RefConflictError(f"{ref} kept moving under {attempts} attempts; retry later")

    # ------------------------------------------------------------------ merges
    def diff_trees(self, old: str | None, new: str | None, prefix: str = "") -> dict[str, Entry | None]:
        """File-level changes from ``old`` to ``new``: path → new entry or ``None``."""
        if old == new:
            return {}
        a = {e.name: e for e in self.read_tree(old)} if old else {}
        b = {e.name: e for e in self.read_tree(new)} if new else {}
        changes: dict[str, Entry | None] = {}
        for name in sorted(a.keys() | b.keys()):
            ea, eb = a.get(name), b.get(name)
            if ea == eb:
                continue
            path = prefix + name
            sub_a = ea.sha if ea is not None and ea.is_tree else None
            sub_b = eb.sha if eb is not None and eb.is_tree else None
            if sub_a or sub_b:
                changes.update(self.diff_trees(sub_a, sub_b, path + "/"))
            if ea is not None and not ea.is_tree and (eb is None or eb.is_tree):
                changes[path] = None
            if eb is not None and not eb.is_tree:
                changes[path] = eb
        return changes

    def merge_tree(self, base_tree: str, commits: Iterable[str]) -> str:
        """The tree that combines each commit's changes relative to ``base_tree``.
        Two commits that change the same file differently raise ``MergeConflictError``."""
        changes: dict[str, Entry | None] = {}
        owner: dict[str, str] = {}
        for commit in commits:
            for path, entry in self.diff_trees(base_tree, self.commit_tree(commit)).items():
                if path in changes and changes[path] != entry:
                    raise MergeConflictError(
                        f"{path} is changed by both {owner[path][:12]} and {commit[:12]}; "
                        "merge nodes that each change a different file"
                    )
                changes[path], owner[path] = entry, commit
        return self.update_tree(base_tree, changes) if changes else base_tree
