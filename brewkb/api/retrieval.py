"""``index`` and ``search`` over the working tree or a revision."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from brewkb.errors import RecipeError
from brewkb.kb import KB
from brewkb.recipes import parse_recipe
from brewkb.retrieval.ranking import open_index, retrieve

__all__ = ["SearchResult", "IndexInfo", "build_index", "search"]


@dataclass(frozen=True)
class SearchResult:
    name: str
    score: float
    concept: str
    path: str | None  # None when no file holds the recipe
    snippet: str

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "score": round(self.score, 4), "concept": self.concept, "path": self.path}


@dataclass(frozen=True)
class IndexInfo:
    recipes: int
    rev: str | None


def build_index(*, rev: str | None = None, start: Path = Path(".")) -> IndexInfo:
    """Build (or find up to date) the index of the working tree or ``rev``."""
    with KB.open(start, require_kb=True) as kb:
        index = open_index(kb, rev)
        return IndexInfo(recipes=len(index), rev=rev)


def search(query: str, *, k: int = 3, rev: str | None = None, start: Path = Path(".")) -> list[SearchResult]:
    """The ``k`` best recipes for ``query``; the working tree unless ``rev``."""
    with KB.open(start, require_kb=True) as kb:
        hits = retrieve(open_index(kb, rev), query, k)
        paths = recipe_paths(kb, rev, [h.name for h in hits])
        return [SearchResult(h.name, h.score, h.concept, paths.get(h.name), h.snippet) for h in hits]


def recipe_paths(kb: KB, rev: str | None, names: list[str]) -> dict[str, str]:
    """Where each named recipe's file is (``REV:path`` at a revision). A file is
    usually named after its recipe; the others are found by reading the files,
    and a name that no file holds gets no path at all."""
    prefix = kb.recipes_prefix()
    if rev is None:
        files = {f"{prefix}/{p.name}": p for p in kb.recipe_files()}
        read = lambda path: files[path].read_bytes()  # noqa: E731
        where = ""
    else:
        folder = kb.store.read_folder(kb.store.resolve(rev), prefix)
        files, read, where = {path: Path(path) for path in folder}, folder.__getitem__, f"{rev}:"
    found = {n: f"{prefix}/{n}.md" for n in names if f"{prefix}/{n}.md" in files}
    for path in files:
        if len(found) == len(set(names)):
            break
        try:
            name = parse_recipe(read(path).decode("utf-8")).name
        except (RecipeError, UnicodeDecodeError):
            continue
        if name in names and name not in found:
            found[name] = path
    return {n: where + p for n, p in found.items()}
