"""Notes: one JSON note per node commit under ``refs/notes/brew``, written
in batches (many nodes, one notes commit) and once per commit; the history
of the notes ref tells which notes a batch wrote, so a note damaged or
removed later can be found again."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from brewkb.errors import GitError, RefConflictError
from brewkb.git.objects import FILE_MODE, Entry, Objects
from brewkb.git.refdb import RefDB
from brewkb.git.refs import NOTES_REF

__all__ = ["Notes", "NotesCommit"]

_HEX40 = re.compile(r"^[0-9a-f]{40}$")


def _note_paths(commit: str) -> tuple[str, ...]:
    """Where git may keep the note of ``commit``: flat or with 1 or 2 fan-out levels."""
    return (commit, f"{commit[:2]}/{commit[2:]}", f"{commit[:2]}/{commit[2:4]}/{commit[4:]}")



@dataclass(frozen=True)
class NotesCommit:
    """A commit of the notes ref and the notes it added or changed (annotated commit → blob)."""

    commit: str
    subject: str
    notes: dict[str, str]


class Notes(RefDB, Objects):
    """The notes of one repository (a part of ``GitStore``)."""

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
        with self.packed():  # the notes, their trees and the commit: one pack, on disk before the ref moves
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

    def notes_history(self, subject_prefix: str, ref: str = NOTES_REF) -> list[NotesCommit]:
        """The commits of ``ref``'s history whose subject starts with
        ``subject_prefix``, oldest first, each with the notes it wrote."""
        head = self.read_ref(ref)
        if not head:
            return []
        found: list[NotesCommit] = []
        ours = False
        # one git process for the whole history: each commit's header, then its changed files
        log = self._git("log", "--raw", "-r", "--no-abbrev", "--no-renames", "--format=%x1e%H%x1f%s", head, "--")
        for line in log.split("\n"):  # not splitlines(): it splits at \x1e too
            if line.startswith("\x1e"):
                commit, _, subject = line[1:].partition("\x1f")
                ours = subject.startswith(subject_prefix)
                if ours:
                    found.append(NotesCommit(commit, subject, {}))
            elif ours and line.startswith(":"):
                fields, _, path = line.partition("\t")
                blob, status = fields.split()[3], fields.split()[4]
                name = path.replace("/", "")
                if status != "D" and _HEX40.match(name):
                    found[-1].notes[name] = blob
        return found[::-1]

    def restore_notes(self, blobs: Mapping[str, str], message: str, *, timestamp: int,
                      ref: str = NOTES_REF) -> str:
        """One notes commit that sets the note of each commit to a blob that
        already exists (replacing a damaged note, or putting back a removed one)."""
        head = self.read_ref(ref)
        root = self.commit_tree(head) if head else None
        changes: dict[str, Entry | None] = {}
        for commit, blob in blobs.items():
            changes.update(dict.fromkeys(_note_paths(commit)))  # one note per commit, whatever the fan-out
            changes[f"{commit[:2]}/{commit[2:]}"] = Entry(FILE_MODE, "", blob)
        tree = self.update_tree(root, changes)
        commit = self.write_commit(tree, [head] if head else [], message, timestamp=timestamp)
        self.update_ref(ref, commit, expected=head)
        return commit
