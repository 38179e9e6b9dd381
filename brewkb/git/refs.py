"""Names of the refs a run owns, as a value that parses and formats them.

    refs/heads/brew/<run>/<concept>/n<id>   a search node
    refs/heads/brew/<run>/kb                the run's knowledge base (gather merges)
    refs/heads/brew/<run>/pr                the single commit a reviewer reads
    refs/heads/brew/<run>/archive           keeps node commits reachable after ``gc``
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from brewkb.errors import GitError

__all__ = ["BrewRef", "NOTES_REF", "RESERVED_CONCEPTS", "check_run_id", "refs_of_kind"]

PREFIX = "refs/heads/brew/"
NOTES_REF = "refs/notes/brew"
# `kb`, `pr` and `archive` are refs of the run itself; a concept folder of that name would
# collide with them (git cannot have both `x` and `x/...`).
RESERVED_CONCEPTS = frozenset({"kb", "pr", "archive"})
_RUN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_CONCEPT_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


def check_run_id(run: str) -> str:
    if not _RUN_RE.match(run) or ".." in run or run.endswith((".lock", ".")):
        raise GitError(
            f"run id {run!r} is not usable in a git ref; use letters, digits, '.', '_' and '-' "
            "(starting with a letter or digit, at most 100 chars)"
        )
    return run


@dataclass(frozen=True, order=True)
class BrewRef:
    """A ref of a run: ``kind`` is ``"node"``, ``"kb"``, ``"pr"`` or ``"archive"``."""

    run: str
    kind: str
    concept: str | None = None
    node: int | None = None

    def __post_init__(self) -> None:
        check_run_id(self.run)
        if self.kind == "node":
            if self.concept is None or self.node is None:
                raise GitError("a node ref needs a concept and a node id")
            if not _CONCEPT_RE.match(self.concept) or self.concept in RESERVED_CONCEPTS:
                raise GitError(
                    f"concept {self.concept!r} cannot name a node ref; concept names are slugs "
                    f"other than {sorted(RESERVED_CONCEPTS)}"
                )
            if self.node < 0:
                raise GitError(f"node id must be ≥ 0, got {self.node}")
        elif self.kind not in ("kb", "pr", "archive"):
            raise GitError(f"unknown run ref kind {self.kind!r}")

    @classmethod
    def for_node(cls, run: str, concept: str, node: int) -> BrewRef:
        return cls(run, "node", concept, node)

    @classmethod
    def kb(cls, run: str) -> BrewRef:
        return cls(run, "kb")

    @classmethod
    def pr(cls, run: str) -> BrewRef:
        return cls(run, "pr")

    @classmethod
    def archive(cls, run: str) -> BrewRef:
        return cls(run, "archive")

    @staticmethod
    def run_prefix(run: str) -> str:
        return f"{PREFIX}{check_run_id(run)}/"

    @classmethod
    def parse(cls, ref: str) -> BrewRef:
        if not ref.startswith(PREFIX):
            raise GitError(f"{ref!r} is not a brewkb ref (they start with {PREFIX})")
        parts = ref[len(PREFIX) :].split("/")
        if len(parts) == 2 and parts[1] in ("kb", "pr", "archive"):
            return cls(parts[0], parts[1])
        if len(parts) == 3 and re.fullmatch(r"n\d+", parts[2]):
            return cls(parts[0], "node", parts[1], int(parts[2][1:]))
        raise GitError(f"{ref!r} is not a brewkb run ref (…/<run>/kb, …/pr, …/archive or …/<concept>/n<id>)")

    def __str__(self) -> str:
        tail = f"{self.concept}/n{self.node}" if self.kind == "node" else self.kind
        return f"{PREFIX}{self.run}/{tail}"

    @property
    def short(self) -> str:
        """The branch name without ``refs/heads/``."""
        return str(self)[len("refs/heads/") :]


def refs_of_kind(refs: Mapping[str, str], kind: str) -> list[tuple[BrewRef, str]]:
    """The run refs of ``kind`` (``node``, ``kb``, ``pr``, ``archive``) among
    ``refs`` (full ref name → commit, as ``list_refs`` gives them), with their
    commits, by name; a branch a person made under ``brew/`` is none of a
    run's and is skipped."""
    found = []
    for name, commit in sorted(refs.items()):
        try:
            ref = BrewRef.parse(name)
        except GitError:
            continue
        if ref.kind == kind:
            found.append((ref, commit))
    return found
