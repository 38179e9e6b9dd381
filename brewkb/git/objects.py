"""Git objects: blobs, trees and commits read through GitPython's persistent
``git cat-file --batch`` process and written in-process, as loose objects or,
inside ``packed()``, as one pack; and the tree arithmetic a search needs
(replace one file, diff, merge)."""

from __future__ import annotations

import errno
import hashlib
import os
import re
import subprocess
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import git
from gitdb.exc import BadObject

from brewkb.errors import GitError, MergeConflictError
from brewkb.fsutil import is_disk_full
from brewkb.git.pack import write_pack

__all__ = ["Objects", "Entry", "Identity", "format_message", "parse_trailers", "blob_id", "FILE_MODE", "TREE_MODE"]

FILE_MODE = "100644"
TREE_MODE = "40000"
LOOSE_LIMIT = 32  # a batch of fewer objects is written loose: a pack per handful of objects would pile up
REGULAR = ("100644", "100755")


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



class Objects:
    """Reading and writing objects of one repository (a part of ``GitStore``)."""

    _repo: git.Repo
    git_dir: Path
    _objects_str: str
    _folders: set[str]
    _written: set[str]
    _trees: dict[str, list[Entry]]
    _names: dict[str, dict[str, Entry]]
    """Tree id → its entries by name, for the trees ``lookup`` went through."""
    _identity: tuple[str, str] | None
    _pending: dict[str, tuple[str, bytes]]
    """Objects written inside ``packed()`` and not yet on disk: id → (kind, content)."""
    _packing: int

    @contextmanager
    def packed(self) -> Iterator[None]:
        """Objects written inside go to disk together, as one pack, when the
        outermost ``packed()`` ends (or earlier, before a ref is moved or git
        is asked to read them). Reads inside see them."""
        self._packing += 1
        try:
            yield
        finally:
            self._packing -= 1
            if not self._packing:
                self.flush_objects()

    def flush_objects(self) -> None:
        """Put the objects written inside ``packed()`` on disk."""
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        try:
            if len(pending) < LOOSE_LIMIT:
                for sha, (kind, data) in pending.items():
                    self._write_loose(sha, f"{kind} {len(data)}\0".encode() + data)
            else:
                write_pack(f"{self._objects_str}/pack", pending)
        except OSError as exc:
            self._pending = pending  # still pending: no ref may name them, the next ref update tries again
            if is_disk_full(exc):  # the command names the file and says how to go on
                raise exc if exc.filename else OSError(exc.errno, exc.strerror, self._objects_str) from None
            raise GitError(f"cannot write {len(pending)} objects into {self._objects_str}: {exc}") from None

    def read_raw(self, sha: str) -> tuple[str, bytes]:
        if sha in self._pending:
            return self._pending[sha]
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
        self.flush_objects()  # git reads them from disk
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
            names = self._names.get(entry.sha)
            if names is None:  # by name, the first of equals as a scan would find (notes look up thousands)
                names = self._names[entry.sha] = {e.name: e for e in reversed(self.read_tree(entry.sha))}
            entry = names.get(part)
        return entry

    def read_folder(self, commit: str, folder: str, suffix: str = ".md") -> dict[str, bytes]:
        """Regular files directly in ``folder`` at ``commit`` whose name ends in
        ``suffix``, keyed by their path in the repository."""
        entry = self.lookup(self.commit_tree(commit), folder)
        if entry is None or not entry.is_tree:
            return {}
        prefix = folder.strip("/")
        return {
            f"{prefix}/{e.name}" if prefix else e.name: self.read_blob(e.sha)
            for e in self.read_tree(entry.sha)
            if e.mode in REGULAR and e.name.endswith(suffix)  # a symbolic link's blob is where it leads
        }

    def _write_object(self, kind: str, data: bytes) -> str:
        raw = f"{kind} {len(data)}\0".encode() + data
        sha = hashlib.sha1(raw).hexdigest()
        if sha in self._written:
            return sha
        if self._packing:
            self._pending[sha] = (kind, data)
        else:
            self._write_loose(sha, raw)
        self._written.add(sha)
        return sha

    def _write_loose(self, sha: str, raw: bytes) -> None:
        # plain strings and os calls: this runs for every object a search writes outside a pack
        folder = f"{self._objects_str}/{sha[:2]}"
        target = f"{folder}/{sha[2:]}"
        if not os.path.exists(target):
            if folder not in self._folders:
                os.makedirs(folder, exist_ok=True)
                self._folders.add(folder)
            tmp = f"{folder}/tmp_obj_{os.getpid()}_{sha[2:]}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o444)
            try:
                packed = zlib.compress(raw, 1)
                if os.write(fd, packed) != len(packed):  # a full disk: never an object cut short
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self._objects_str)
            except OSError as exc:
                os.close(fd)
                os.unlink(tmp)
                raise OSError(exc.errno, exc.strerror, exc.filename or self._objects_str) from None
            os.close(fd)
            os.replace(tmp, target)

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
