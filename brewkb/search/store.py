"""The search's git record: node commits and branches, reward notes, gather
merges on the run's ``kb`` branch, the ``pr`` commit, and the rebuild of all
of it from git alone.

Commit dates are derived from the base commit and the iteration, so a run
repeated with the same seed on the same base writes the same commit ids.

Loading finds a run's record again where a part of it is missing or damaged
(``brewkb.search.recover``): a command that reads the run says what it found
and uses it; ``repair`` puts it back for a command that continues the run.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from brewkb.errors import GitError, RefConflictError
from brewkb.git.refs import PREFIX, BrewRef, refs_of_kind
from brewkb.git.store import (
    FILE_MODE,
    Entry,
    GitStore,
    blob_id,
    format_message,
    parse_trailers,
)
from brewkb.git.notes import NotesCommit
from brewkb.recipes import SOURCES_SHOWN, parse_recipe, render_for_file, render_recipe
from brewkb.search.recover import Damage, find_nodes, find_notes, read_commits

__all__ = ["SearchStore", "StoredNode", "StoredRun", "find_base"]

log = logging.getLogger(__name__)


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
    damage: list[Damage] = field(default_factory=list)
    """What was missing or damaged, and where it was found again."""


def find_base(store: GitStore, run: str) -> str:
    """The base commit of a run: the parent of a root node, else the first
    parent at the end of its ``kb`` chain, else the archive's first parent."""
    refs = store.list_refs(BrewRef.run_prefix(run))
    roots = [c for r, c in sorted(refs.items()) if r.endswith("/n0")]
    for root in read_commits(store, roots).values():
        key = root.node_key(run)
        if key is not None and key[1] == 0 and root.parents:
            return root.parents[0]
    kb = refs.get(str(BrewRef.kb(run)))
    seen = 0
    while kb is not None and seen < 100_000:
        gather = read_commits(store, [kb]).get(kb)
        if gather is None:
            break
        if gather.trailers.get("Brew-Run") != run or "Brew-Iteration" not in gather.trailers:
            return kb if seen else _archive_base(store, run, kb)
        kb, seen = (gather.parents[0] if gather.parents else None), seen + 1
    base = _archive_base(store, run, None)
    if base is not None:
        return base
    every = store.list_refs(PREFIX)
    runs = sorted({ref.run for kind in ("kb", "pr") for ref, _ in refs_of_kind(every, kind)})
    raise GitError(f"no run {run!r} in this repository (no refs under {BrewRef.run_prefix(run)}"
                   + (f"; its runs: {', '.join(runs)}" if runs else "") + "); fetch it with "
                   "`git fetch <remote> 'refs/heads/brew/*:refs/heads/brew/*' 'refs/notes/brew:refs/notes/brew'`")


def _archive_base(store: GitStore, run: str, fallback: str | None) -> Any:
    archive = store.read_ref(str(BrewRef.archive(run)))
    info = read_commits(store, [archive]).get(archive) if archive else None
    return info.parents[0] if info is not None and info.parents else fallback


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
        self._history: list[NotesCommit] | None = None
        self._kb_seen: str | None = None  # the kb ref as this process last saw or wrote it
        self._kb_tip: str | None = None  # the last valid gather of that chain
        self._damage: list[Damage] = []
        self._branches: dict[tuple[str, int], str] = {}  # node → commit, for the branches this process relies on

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
        shown = ", ".join(sources)
        self._texts[blob] = _with_all_sources(text, shown)  # as a resumed run reads it back
        tree = self.git.update_tree(self.base_tree, {self.path(concept): Entry(FILE_MODE, "", blob)})
        trailers = {"Brew-Run": self.run, "Brew-Concept": concept, "Brew-Node": f"n{node_id}",
                    "Brew-Parent": f"n{parent}" if parent is not None else "base", "Brew-Iteration": str(iteration),
                    "Brew-Sample": str(sample), "Brew-Sources": shown or "none"}
        message = format_message(f"brew({self.run}): {concept} n{node_id}",
                                 f"A candidate version of {self.path(concept)}.", trailers)
        commit = self.git.write_commit(tree, [parent_commit], message, timestamp=self.timestamp(iteration))
        self._sources[commit] = list(sources)
        self._branches[(concept, node_id)] = commit
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
        now = self.git.read_ref(ref)
        if now != self._kb_seen:
            if now is not None:
                raise GitError(f"{ref} moved to {now[:12]}, which this run did not write; another process or a "
                               f"person changed it: point it back (`git update-ref {ref} "
                               f"{self._kb_seen or self.base}`) and resume the run")
            log.warning("%s was deleted while the run was writing it; writing it again on its last gather "
                        "(its history is kept)", ref)
        previous = self._kb_tip
        tree = self.git.update_tree(self.base_tree, {self.path(c): Entry(FILE_MODE, "", b) if b else None
                                                     for c, (_, b, _) in best.items()})
        parents = [previous or self.base] + list(dict.fromkeys(commit for commit, _, _ in best.values()))
        trailers = {"Brew-Run": self.run, "Brew-Iteration": str(iteration),
                    "Brew-Best": ", ".join(f"{c}={_label(n)}" for c, (_, _, n) in sorted(best.items()))[:2000]}
        if final:
            trailers["Brew-Final"] = "true"
        message = format_message(f"brew({self.run}): gather iteration {iteration}", summary, trailers)
        commit = self.git.write_commit(tree, parents, message, timestamp=self.timestamp(iteration) + 30)
        self.git.update_ref(ref, commit, expected=now)
        self._kb_seen = self._kb_tip = commit
        return commit

    def final_commit(self) -> str | None:
        """The ``kb`` tip when it is the final gather; else the final gather the
        notes' history records, when the ``kb`` branch is gone or stops one
        gather short of it (``settle_final`` moves the branch there); else ``None``."""
        kb = self.git.read_ref(str(BrewRef.kb(self.run)))
        info = read_commits(self.git, [kb]).get(kb) if kb else None
        if kb is not None and info is not None and "Brew-Final" in info.trailers:
            return kb
        recorded = [c for batch in self.history() if batch.subject.endswith(": final evaluation")
                    for c in batch.notes]
        final = read_commits(self.git, recorded[-1:]) if recorded else {}
        for commit, found in final.items():
            if found.trailers.get("Brew-Run") == self.run and "Brew-Final" in found.trailers and \
                    (kb is None or info is None or found.parents[:1] == (kb,)):
                return commit
        return None

    def settle_final(self) -> None:
        """Point ``kb`` at the recorded final gather when a repair left it short of it."""
        final = self.final_commit()
        ref = str(BrewRef.kb(self.run))
        now = self.git.read_ref(ref)
        if final is not None and now != final:
            self.git.update_ref(ref, final, expected=now)
            self._kb_seen = self._kb_tip = final
            log.warning("%s stopped short of the run's final gather; moved it to %s, which the notes record",
                        ref, final[:12])

    def history(self) -> list[NotesCommit]:
        """The run's commits of the notes ref, oldest first, with the notes each wrote."""
        if self._history is None:
            self._history = self.git.notes_history(f"brew({self.run}): ")
        return self._history

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
        return refs_of_kind(self.git.list_refs(BrewRef.run_prefix(self.run)), "node")

    def _archived(self, archive: str | None) -> list[tuple[tuple[str, int], str]]:
        """(concept, node id) → commit of every node the archive keeps."""
        if archive is None:
            return []
        parents = self.git.read_commit(archive)["parent"][1:]
        out = []
        for commit, raw in zip(parents, self.git.read_many(parents), strict=True):
            trailers = parse_trailers((raw or b"").decode("utf-8", "replace").partition("\n\n")[2])
            if "Brew-Concept" in trailers and trailers.get("Brew-Node", "")[1:].isdigit():
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
        read in a few batches (a run of 30,000 nodes rebuilds in seconds).
        What is missing or damaged is found again where the rest of the
        record allows (``StoredRun.damage`` says what and from where); a node
        that cannot be found raises ``GitError`` naming its ref."""
        out = StoredRun()
        live = self._node_refs()
        have = {(r.concept, r.node) for r, _ in live}
        archived = [(BrewRef.for_node(self.run, c, n), commit)
                    for (c, n), commit in self._archived(self.git.read_ref(str(BrewRef.archive(self.run))))
                    if (c, n) not in have]
        chain, kb_damage = self._kb_chain()
        sources = {c: "the history of refs/notes/brew" for batch in self.history() for c in batch.notes}
        sources.update({p: f"a gather of {BrewRef.kb(self.run)}" for parents in chain for p in parents[1:]})
        found, damage = find_nodes(self.git, self.run, sorted(live + archived), sources)
        for ref in self._gaps(found)[:1]:
            raise GitError(f"{ref} is missing and git holds no commit of it (its branch was deleted and nothing "
                           f"else of the run names it); fetch the run from a clone that has it (`git fetch REMOTE "
                           f"'refs/heads/brew/{self.run}/*:refs/heads/brew/{self.run}/*'`), or start a new run")
        for d in damage:
            if not d.found:
                raise GitError(d.reading())
        keys = sorted(found)
        # the branches this process relies on: those that name their node, and those repair() puts back
        named = {(r.concept or "", r.node or 0) for r, _ in live} | {
            (BrewRef.parse(d.ref).concept or "", BrewRef.parse(d.ref).node or 0) for d in damage if d.ref}
        self._branches.update({key: found[key].commit for key in named if key in found})
        texts = self.git.read_many([f"{found[k].commit}:{self.path(k[0])}" for k in keys])
        refs = {found[k].commit: str(BrewRef.for_node(self.run, *k)) for k in keys}
        notes, note_damage = find_notes(self.git, refs, self.git.note_blobs(), self.history())
        for key, text in zip(keys, texts, strict=True):
            commit, trailers = found[key].commit, found[key].meta.trailers
            if text is None:
                raise GitError(f"{refs[commit]} does not hold {self.path(key[0])}")
            parent = trailers.get("Brew-Parent", "base")
            blob = blob_id(text)
            self._texts[blob] = _with_all_sources(text.decode("utf-8", "replace"), trailers.get("Brew-Sources", ""))
            self._sources[commit] = [s for s in trailers.get("Brew-Sources", "").split(", ") if s and s != "none"]
            out.nodes.setdefault(key[0], []).append(StoredNode(
                concept=key[0], id=key[1], parent=int(parent[1:]) if parent[1:].isdigit() else None,
                iteration=int(trailers["Brew-Iteration"]), sample=int(trailers.get("Brew-Sample", "0") or 0),
                commit=commit, blob=blob, note=notes.get(commit)))
        out.kb_commit = chain[0][0] if chain else None
        out.gathers = len(chain)
        if not chain and not kb_damage and any(k for _, k in found):  # iteration 0 was gathered before n1 exists
            problem = "is missing" if self._kb_seen is None else \
                f"points at {self._kb_seen[:12]}, which is not a chain of this run's gathers"
            kb_damage = [Damage(str(BrewRef.kb(self.run)), problem, found="the nodes and their notes",
                                fix=f"`brewkb refine --resume {self.run}` writes it again")]
        out.damage = damage + note_damage + kb_damage
        self._damage = out.damage
        return out

    def _gaps(self, found: Mapping[tuple[str, int], Any]) -> list[str]:
        """The refs of node ids below a concept's highest one that nothing found."""
        top: dict[str, int] = {}
        for concept, node in found:
            top[concept] = max(top.get(concept, -1), node)
        return [str(BrewRef.for_node(self.run, c, n))
                for c, last in sorted(top.items()) for n in range(last) if (c, n) not in found]

    def _kb_chain(self) -> tuple[list[tuple[str, ...]], list[Damage]]:
        """The gathers of the ``kb`` branch, tip first, as (commit, *parents);
        a branch that is missing or holds something else gives none, and a damage."""
        ref = str(BrewRef.kb(self.run))
        kb = self._kb_seen = self.git.read_ref(ref)
        chain: list[tuple[str, ...]] = []
        commit = kb
        while commit is not None and commit != self.base:
            info = read_commits(self.git, [commit]).get(commit)
            if info is None or info.trailers.get("Brew-Run") != self.run or "Brew-Iteration" not in \
                    info.trailers or not info.parents:
                self._kb_tip = None
                return [], [Damage(ref, f"points at {kb[:12] if kb else '?'}, which is not a chain of this run's "
                                        "gathers", found="the nodes and their notes",
                                   fix=f"`brewkb refine --resume {self.run}` writes it again")]
            chain.append((commit, *info.parents))
            commit = info.parents[0]
        self._kb_tip = kb if chain else None
        return chain, []

    def keep_branches(self) -> None:
        """Put back the node branches that were deleted or moved while this
        process ran the search (it knows their commits), saying so."""
        live = {(r.concept or "", r.node or 0): c for r, c in self._node_refs()}
        for key, commit in sorted(self._branches.items()):
            if live.get(key) != commit:
                ref = str(BrewRef.for_node(self.run, *key))
                self.git.update_ref(ref, commit, expected=live.get(key))
                log.warning("%s was %s while the run was writing it; put it back at %s", ref,
                            "deleted" if key not in live else "moved", commit[:12])

    def report(self) -> None:
        """Log what ``load`` found missing or damaged, for a command that only reads the run."""
        for d in self._damage:
            log.warning("%s", d.reading())

    def repair(self) -> None:
        """Put back what ``load`` found again (node branches, notes), saying so;
        refuse a run with damage that cannot be repaired. The ``kb`` branch is
        written again by the search, which replays its gathers."""
        for d in self._damage:
            if not d.found:
                raise GitError(d.reading())
        notes = {}
        for d in self._damage:
            if d.ref is not None and d.commit is not None:
                self.git.update_ref(d.ref, d.commit, expected=self.git.read_ref(d.ref))
            elif d.note is not None:
                notes[d.note[0]] = d.note[1]
            log.warning("%s", d.repaired())
        if notes:
            self.git.restore_notes(notes, f"brew({self.run}): restore {len(notes)} damaged note(s)\n",
                                   timestamp=self._t0)
            self._history = None
        self._damage = []

    def final_note(self) -> Mapping[str, Any] | None:
        """The final evaluation recorded on the final gather (``None`` before
        it); a damaged one is taken from the notes' history."""
        final = self.final_commit()
        if final is None:
            return None
        blobs = [b for batch in self.history() for c, b in batch.notes.items() if c == final]
        current = self.git.note_blobs().get(final)
        for blob in ([current] if current else []) + blobs[::-1]:
            [raw] = self.git.read_many([blob])
            note = _final_note(raw)
            if note is not None:
                if blob != current:
                    log.warning("the final note on %s is damaged or missing; using the one the run wrote", final[:12])
                return note
        return None

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


def _final_note(raw: bytes | None) -> dict[str, Any] | None:
    try:
        note = json.loads(raw) if raw is not None else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return note if isinstance(note, dict) and isinstance(note.get("concepts"), dict) else None
