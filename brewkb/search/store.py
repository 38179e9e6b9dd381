"""The search's git record: node commits and branches, reward notes, gather
merges on the run's ``kb`` branch, the ``pr`` commit, and the rebuild of all
of it from git alone.

Commit dates are derived from the base commit and the iteration, so a run
repeated with the same seed on the same base writes the same commit ids.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from brewkb.errors import GitError, RefConflictError
from brewkb.git.refs import BrewRef
from brewkb.git.store import (
    FILE_MODE,
    Entry,
    GitStore,
    blob_id,
    format_message,
    parse_trailers,
)
from brewkb.recipes import SOURCES_SHOWN, parse_recipe, render_for_file, render_recipe

__all__ = ["SearchStore", "StoredNode", "StoredRun", "find_base"]


@dataclass(frozen=True)
class StoredNode:
    concept: str
    id: int
    parent: int | None
    iteration: int
    sample: int
    commit: str
    blob: str
    note: Mapping[str, Any] | None


@dataclass
class StoredRun:
    """What git holds of a run: its nodes and how many gathers it completed."""

    nodes: dict[str, list[StoredNode]] = field(default_factory=dict)
    gathers: int = 0
    kb_commit: str | None = None


def find_base(store: GitStore, run: str) -> str:
    """The base commit of a run: the first parent at the end of its ``kb``
    chain, or the parent of a root node."""
    kb = store.read_ref(str(BrewRef.kb(run)))
    if kb is not None:
        while True:
            fields = store.read_commit(kb)
            if "Brew-Iteration" not in parse_trailers(fields["message"][0]):
                return kb
            kb = fields["parent"][0]
    for ref, commit in sorted(store.list_refs(BrewRef.run_prefix(run)).items()):
        if ref.endswith("/n0"):
            return store.read_commit(commit)["parent"][0]
    raise GitError(f"no run {run!r} in this repository (no refs under {BrewRef.run_prefix(run)}); "
                   "fetch it with `git fetch <remote> 'refs/heads/brew/*:refs/heads/brew/*' 'refs/notes/brew:refs/notes/brew'`")


def _with_all_sources(text: str, trailer: str) -> str:
    every = [s for s in trailer.split(", ") if s and s != "none"]
    if len(every) <= SOURCES_SHOWN:
        return text
    return render_recipe(parse_recipe(text).replace(sources=tuple(every)))


class SearchStore:
    def __init__(self, store: GitStore, run: str, base_commit: str, recipes_dir: str) -> None:
        self.git = store
        self.run = run
        self.base = base_commit
        self.base_tree = store.commit_tree(base_commit)
        self.recipes_dir = recipes_dir.strip("/")
        committer = store.read_commit(base_commit).get("committer", ["x 0 +0000"])[0]
        self._t0 = int(committer.rsplit(" ", 2)[-2])
        self._texts: dict[str, str] = {}
        self._sources: dict[str, list[str]] = {}
        self._deferred: list[tuple[str, str]] | None = None  # node branches to create when ``writing()`` ends

    def timestamp(self, iteration: int) -> int:
        return self._t0 + 60 * (iteration + 1)

    def path(self, concept: str) -> str:
        return f"{self.recipes_dir}/{concept}.md" if self.recipes_dir else f"{concept}.md"

    # ------------------------------------------------------------- writing
    def write_node(self, concept: str, node_id: int, parent: int | None, parent_commit: str, iteration: int,
                   sample: int, text: str, sources: Sequence[str]) -> tuple[str, str]:
        """Commit the document and create its branch; returns (commit, blob).
        Writing a node that already exists with the same content is a no-op
        (a resumed run regenerates it)."""
        if len(sources) > SOURCES_SHOWN:
            text = render_for_file(parse_recipe(text))
        blob = self.git.write_blob(text.encode())
        self._texts.setdefault(blob, text)  # what `text` would read back from the blob
        tree = self.git.update_tree(self.base_tree, {self.path(concept): Entry(FILE_MODE, "", blob)})
        shown = ", ".join(sources)
        trailers = {"Brew-Run": self.run, "Brew-Concept": concept, "Brew-Node": f"n{node_id}",
                    "Brew-Parent": f"n{parent}" if parent is not None else "base", "Brew-Iteration": str(iteration),
                    "Brew-Sample": str(sample), "Brew-Sources": shown or "none"}
        message = format_message(f"brew({self.run}): {concept} n{node_id}",
                                 f"A candidate version of {self.path(concept)}.", trailers)
        commit = self.git.write_commit(tree, [parent_commit], message, timestamp=self.timestamp(iteration))
        self._sources[commit] = list(sources)
        ref = str(BrewRef.for_node(self.run, concept, node_id))
        if self._deferred is not None:
            self._deferred.append((ref, commit))
        else:
            self._create_node_ref(ref, commit)
        return commit, blob

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Nodes written inside go to disk as one pack, and their branches are
        created when it is (also when the block raises: a node written is
        kept). A process killed inside leaves none of them behind: a resumed
        run writes them again, as it does the nodes of an iteration it had not
        reached."""
        if self._deferred is not None:
            yield
            return
        self._deferred = []
        try:
            with self.git.packed():
                yield
        finally:
            deferred, self._deferred = self._deferred, None
            for ref, commit in deferred:  # each update puts objects still pending on disk first, or raises
                self._create_node_ref(ref, commit)

    def _create_node_ref(self, ref: str, commit: str) -> None:
        try:
            self.git.update_ref(ref, commit, expected=None)
        except RefConflictError:
            if self.git.read_ref(ref) != commit:
                raise GitError(f"{ref} exists with other content; the run's history differs from this "
                               "search (was the base or the config changed?)") from None

    def write_notes(self, notes: Mapping[str, Any], iteration: int) -> None:
        """One notes commit for the iteration's evaluations (a note is written
        once); each note also lists the node's source trajectories."""
        with_sources = {commit: {**note, "sources": self._sources[commit]}
                        if isinstance(note, dict) and commit in self._sources else note
                        for commit, note in notes.items()}
        self.git.add_notes(with_sources, f"brew({self.run}): rewards of iteration {iteration}\n",
                           timestamp=self.timestamp(iteration))

    def gather(self, iteration: int, best: Mapping[str, tuple[str, str, int | str]], summary: str,
               final: bool = False) -> str:
        """Advance ``kb`` by one merge commit whose parents are the previous KB
        commit and each concept's best node; ``best`` maps concept → (commit,
        blob, node id, or ``"base"`` for the base version; an empty blob leaves
        the concept's file out). ``final`` marks the gather that ends the search
        (after the final evaluation and the gate)."""
        ref = str(BrewRef.kb(self.run))
        previous = self.git.read_ref(ref)
        tree = self.git.update_tree(self.base_tree, {self.path(c): Entry(FILE_MODE, "", b) if b else None
                                                     for c, (_, b, _) in best.items()})
        parents = [previous or self.base] + list(dict.fromkeys(commit for commit, _, _ in best.values()))
        trailers = {"Brew-Run": self.run, "Brew-Iteration": str(iteration),
                    "Brew-Best": ", ".join(f"{c}={_label(n)}" for c, (_, _, n) in sorted(best.items()))[:2000]}
        if final:
            trailers["Brew-Final"] = "true"
        message = format_message(f"brew({self.run}): gather iteration {iteration}", summary, trailers)
        commit = self.git.write_commit(tree, parents, message, timestamp=self.timestamp(iteration) + 30)
        self.git.update_ref(ref, commit, expected=previous)
        return commit

    def final_commit(self) -> str | None:
        """The ``kb`` tip when it is the final gather, else ``None``."""
        kb = self.git.read_ref(str(BrewRef.kb(self.run)))
        if kb is None:
            return None
        return kb if "Brew-Final" in parse_trailers(self.git.read_commit(kb)["message"][0]) else None

    def archive(self) -> int:
        """Point ``archive`` at a commit whose parents are every node commit of
        the run (and of the previous archive), so the nodes and their notes stay
        reachable, pushable and readable once their branches are deleted.
        Returns the number of node commits archived."""
        ref = str(BrewRef.archive(self.run))
        previous = self.git.read_ref(ref)
        commits = dict(self._archived(previous))
        commits.update({(r.concept or "", r.node or 0): c for r, c in self._node_refs()})
        parents = [self.base] + [commits[k] for k in sorted(commits)]
        message = format_message(f"brew({self.run}): archive of {len(commits)} nodes",
                                 "Keeps the run's node commits reachable; see `brewkb tree`.",
                                 {"Brew-Run": self.run, "Brew-Archive": str(len(commits))})
        commit = self.git.write_commit(self.base_tree, parents, message, timestamp=self._t0)
        self.git.update_ref(ref, commit, expected=previous)
        return len(commits)

    def _node_refs(self) -> list[tuple[BrewRef, str]]:
        refs = [(BrewRef.parse(ref), commit)
                for ref, commit in sorted(self.git.list_refs(BrewRef.run_prefix(self.run)).items())]
        return [(ref, commit) for ref, commit in refs if ref.kind == "node"]

    def _archived(self, archive: str | None) -> list[tuple[tuple[str, int], str]]:
        """(concept, node id) → commit of every node the archive keeps."""
        if archive is None:
            return []
        parents = self.git.read_commit(archive)["parent"][1:]
        out = []
        for commit, raw in zip(parents, self.git.read_many(parents), strict=True):
            trailers = parse_trailers((raw or b"").decode("utf-8", "replace").partition("\n\n")[2])
            if "Brew-Concept" in trailers and "Brew-Node" in trailers:
                out.append(((trailers["Brew-Concept"], int(trailers["Brew-Node"][1:])), commit))
        return out

    def write_pr(self, body: str, iteration: int) -> str:
        """One commit on the base with the final recipes (the ``kb`` tip's tree)."""
        kb = self.git.read_ref(str(BrewRef.kb(self.run)))
        if kb is None:
            raise GitError(f"run {self.run} has no kb branch yet")
        commit = self.git.write_commit(self.git.commit_tree(kb), [self.base], body,
                                       timestamp=self.timestamp(iteration) + 45)
        ref = str(BrewRef.pr(self.run))
        self.git.update_ref(ref, commit, expected=self.git.read_ref(ref))
        return commit

    # ------------------------------------------------------------- reading
    def load(self) -> StoredRun:
        """Nodes, notes and gathers of the run, from refs, commits and notes,
        read in a few batches (a run of 30,000 nodes rebuilds in seconds)."""
        out = StoredRun()
        live = self._node_refs()
        have = {(r.concept, r.node) for r, _ in live}
        archived = [(BrewRef.for_node(self.run, c, n), commit)
                    for (c, n), commit in self._archived(self.git.read_ref(str(BrewRef.archive(self.run))))
                    if (c, n) not in have]
        nodes = sorted(live + archived)
        note_blobs = self.git.note_blobs()
        commits = self.git.read_many([c for _, c in nodes])
        blobs = self.git.read_many([f"{c}:{self.path(ref.concept or '')}" for ref, c in nodes])
        noted = [c for _, c in nodes if c in note_blobs]
        notes = dict(zip(noted, self.git.read_many([note_blobs[c] for c in noted]), strict=True))
        for (ref, commit), raw, text in zip(nodes, commits, blobs, strict=True):
            if raw is None or text is None:
                raise GitError(f"{ref} does not hold {self.path(ref.concept or '')}")
            message = raw.decode("utf-8", "replace").partition("\n\n")[2]
            trailers = parse_trailers(message)
            parent = trailers.get("Brew-Parent", "base")
            note = json.loads(notes[commit] or b"null") if commit in notes else None
            blob = blob_id(text)
            self._texts[blob] = _with_all_sources(text.decode("utf-8"), trailers.get("Brew-Sources", ""))
            out.nodes.setdefault(ref.concept or "", []).append(StoredNode(
                concept=ref.concept or "", id=ref.node or 0, parent=None if parent == "base" else int(parent[1:]),
                iteration=int(trailers["Brew-Iteration"]), sample=int(trailers.get("Brew-Sample", "0")),
                commit=commit, blob=blob, note=note))
        for stored in out.nodes.values():
            stored.sort(key=lambda n: n.id)
        kb = self.git.read_ref(str(BrewRef.kb(self.run)))
        out.kb_commit = kb
        while kb and kb != self.base:
            out.gathers += 1
            kb = self.git.read_commit(kb)["parent"][0]
        return out

    def final_note(self) -> Mapping[str, Any] | None:
        """The final evaluation recorded on the final gather (``None`` before it)."""
        final = self.final_commit()
        note = self.git.read_note(final) if final else None
        return note if isinstance(note, Mapping) else None

    def kb_blobs(self, concepts: Sequence[str], commit: str | None = None) -> dict[str, str]:
        """Concept → blob of its document at the tip of the ``kb`` branch (or at ``commit``)."""
        kb = commit or self.git.read_ref(str(BrewRef.kb(self.run)))
        if kb is None:
            return {}
        folder = self.git.lookup(self.git.commit_tree(kb), self.recipes_dir) if self.recipes_dir else None
        entries = {e.name: e.sha for e in self.git.read_tree(folder.sha if folder else self.git.commit_tree(kb))}
        return {c: entries[f"{c}.md"] for c in concepts if f"{c}.md" in entries}

    def text(self, blob: str) -> str:
        """A node document's text; for a loaded node with every source id of its
        trailer (the blob keeps the first few), so a resumed search continues
        from exactly the document the interrupted one had."""
        if blob not in self._texts:
            self._texts[blob] = self.git.read_blob(blob).decode("utf-8")
        return self._texts[blob]


def _label(node: int | str) -> str:
    return f"n{node}" if isinstance(node, int) else node
