"""Finding a run's record again when part of it is missing or damaged.

A run's git record says most things more than once: a node's commit is
named by its branch, by its children's parent links, by the gathers that
chose it and by the notes commit that wrote its reward; a note is written
once and stays in the history of ``refs/notes/brew`` after it is damaged,
removed or overwritten. So a deleted node branch, a removed or malformed
note, or a deleted root is found again from what remains. Each finding is a
``Damage``: what was wrong and where the run's record was found again, or
that it could not be (the message then says what to do).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from brewkb.git.notes import NotesCommit
from brewkb.git.refs import BrewRef
from brewkb.git.store import GitStore, parse_trailers

__all__ = ["Damage", "Found", "NodeCommit", "read_commits", "find_nodes", "find_notes", "valid_note"]


@dataclass(frozen=True)
class Damage:
    """``subject`` is a ref, or ``the note on <commit> (<ref>)``. A damage with
    ``found`` set can be repaired: ``ref`` goes back to ``commit``, or the
    note of ``note[0]`` back to the blob ``note[1]``."""

    subject: str
    problem: str
    found: str = ""
    """Where the record was found again; empty when it could not be."""
    ref: str | None = None
    commit: str | None = None
    note: tuple[str, str] | None = None
    fix: str = ""
    """What a user can do (when ``found`` is empty), or the git command that restores it by hand."""

    def reading(self) -> str:
        """The message for a command that only reads the run."""
        if not self.found:
            return f"{self.subject} {self.problem}; {self.fix}"
        return f"{self.subject} {self.problem}; found it again in {self.found} ({self.fix})"

    def repaired(self) -> str:
        return f"{self.subject} {self.problem}; restored it from {self.found}"


@dataclass(frozen=True)
class NodeCommit:
    """What a commit's message and header say about it."""

    parents: tuple[str, ...]
    trailers: dict[str, str]

    def node_key(self, run: str) -> tuple[str, int] | None:
        """(concept, node id) when this is a node commit of ``run``."""
        t = self.trailers
        node = t.get("Brew-Node", "")
        if t.get("Brew-Run") != run or "Brew-Concept" not in t or not node[1:].isdigit() or not node.startswith("n"):
            return None
        if not t.get("Brew-Iteration", "").isdigit():
            return None
        return t["Brew-Concept"], int(node[1:])


@dataclass(frozen=True)
class Found:
    commit: str
    meta: NodeCommit


def read_commits(git: GitStore, commits: Sequence[str]) -> dict[str, NodeCommit]:
    """Header parents and trailers of each commit that exists (in one batch)."""
    out = {}
    for commit, raw in zip(commits, git.read_many(list(commits)), strict=True):
        if raw is None:
            continue
        head, _, message = raw.decode("utf-8", "replace").partition("\n\n")
        if not head.startswith("tree "):
            continue  # not a commit
        parents = tuple(line[7:] for line in head.splitlines() if line.startswith("parent "))
        out[commit] = NodeCommit(parents, parse_trailers(message))
    return out


def find_nodes(git: GitStore, run: str, claimed: Sequence[tuple[BrewRef, str]],
               sources: Mapping[str, str]) -> tuple[dict[tuple[str, int], Found], list[Damage]]:
    """The run's nodes: those whose branch (or the archive) names them, checked
    against their own trailers, and those only ``sources`` (commit → where it
    was seen) or a found node's parent link still name."""
    found: dict[tuple[str, int], Found] = {}
    damage: list[Damage] = []
    meta = read_commits(git, [c for _, c in claimed])
    wrong: dict[tuple[str, int], tuple[BrewRef, str]] = {}
    for ref, commit in claimed:
        key = (ref.concept or "", ref.node or 0)
        info = meta.get(commit)
        if info is not None and info.node_key(run) == key:
            found[key] = Found(commit, info)
        else:
            wrong[key] = (ref, commit)
    seen = {c for _, c in claimed}
    queue = dict(sources)
    for f in found.values():
        queue.update(dict.fromkeys(f.meta.parents, "a child node's parent link"))
    while queue:
        todo = {c: s for c, s in queue.items() if c not in seen}
        queue = {}
        seen.update(todo)
        for commit, info in read_commits(git, list(todo)).items():
            node = info.node_key(run)
            if node is None or node in found:
                continue
            found[node] = Found(commit, info)
            name = str(BrewRef.for_node(run, *node))
            problem = f"points at {wrong[node][1][:12]}, which is not that node" if node in wrong else "is missing"
            damage.append(Damage(name, problem, found=todo[commit], ref=name, commit=commit,
                                 fix=f"restore it with `git update-ref {name} {commit}`"))
            queue.update(dict.fromkeys(info.parents, "a child node's parent link"))
    for node, (bad, commit) in sorted(wrong.items()):
        if node not in found:
            damage.append(Damage(str(bad), f"points at {commit[:12]}, which is not node n{node[1]} of {node[0]}",
                                 fix=f"delete it (`git update-ref -d {bad}`): brewkb then finds the node again "
                                     "from the rest of the run"))
    return found, damage


def valid_note(raw: bytes | None) -> dict[str, Any] | None:
    """A node's note, or ``None`` when it is not a JSON object with a numeric reward."""
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or isinstance(data.get("reward"), bool) or \
            not isinstance(data.get("reward"), int | float):
        return None
    return data


def find_notes(git: GitStore, nodes: Mapping[str, str], current: Mapping[str, str],
               history: Sequence[NotesCommit]) -> tuple[dict[str, dict[str, Any] | None], list[Damage]]:
    """The note of each node commit (``nodes``: commit → its ref): the current
    one, or when it is damaged or gone, the one the run wrote (from the notes'
    history). A note damaged beyond that leaves its node unevaluated, with a
    damage that cannot be repaired."""
    written: dict[str, str] = {}
    for batch in history:
        written.update({c: b for c, b in batch.notes.items() if c in nodes})
    commits = [c for c in nodes if c in current]
    raw = dict(zip(commits, git.read_many([current[c] for c in commits]), strict=True))
    notes: dict[str, dict[str, Any] | None] = {}
    damage: list[Damage] = []
    missing = [c for c in nodes if (c not in raw or valid_note(raw[c]) is None) and c in written]
    earlier = dict(zip(missing, git.read_many([written[c] for c in missing]), strict=True))
    for commit, ref in nodes.items():
        note = valid_note(raw.get(commit))
        if note is not None:
            notes[commit] = note
            continue
        subject = f"the note on {commit[:12]} ({ref})"
        problem = "is missing" if commit not in raw else "is not a JSON object with a reward"
        again = valid_note(earlier.get(commit))
        if again is not None:
            notes[commit] = again
            damage.append(Damage(subject, problem, found="the history of refs/notes/brew",
                                 note=(commit, written[commit]),
                                 fix=f"restore it with `git notes --ref brew add -f -C {written[commit]} {commit}`"))
        elif commit in raw:
            notes[commit] = None
            damage.append(Damage(subject, problem + " and refs/notes/brew holds no earlier version of it",
                                 fix="fetch refs/notes/brew from a clone that has it (`git fetch REMOTE "
                                     "refs/notes/brew:refs/notes/brew`), or start a new run"))
        else:
            notes[commit] = None  # never evaluated
    return notes, damage
