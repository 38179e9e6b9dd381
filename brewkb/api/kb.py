"""Setting up and checking a knowledge base: ``init``, ``lint``, ``show``."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from brewkb.config import CONFIG_FILE, DEFAULT_TOML, KBConfig, Signatures, load_config
from brewkb.errors import BrewError, GitError
from brewkb.fsutil import write_atomic
from brewkb.git.store import GitStore
from brewkb.kb import KB
from brewkb.lint import Problem, fix_bom, lint_files, lint_paths, recipe_files
from brewkb.recipes import Recipe
from brewkb.trajectories.scrub import scrubber_of

__all__ = ["InitResult", "init_kb", "lint", "show", "GITIGNORE_LINES"]

GITIGNORE_LINES = (
    "# brewkb: caches and bulky run outputs (manifests and reports may be committed)",
    ".brewkb/",
    "runs/*/*.jsonl",
    "runs/*/serve/",
)


@dataclass(frozen=True)
class InitResult:
    root: Path
    created: list[str] = field(default_factory=list)
    git_initialised: bool = False
    commit: str | None = None
    already: bool = False
    """The folder was a KB already (its ``brewkb.toml`` is kept; nothing was done)."""


def _repo_top(path: Path) -> Path | None:
    try:
        store = GitStore(path)
    except GitError:
        return None
    try:
        return store.require_work_tree().resolve()
    finally:
        store.close()


def init_kb(path: Path, *, force: bool = False, commit: bool = True) -> InitResult:
    """Make ``path`` a KB: ``brewkb.toml``, ``recipes/``, ``runs/``, ignore
    entries for caches, and ``git init`` when it is not in a repository yet;
    in a repository without commits, commit the files it wrote (unless
    ``commit`` is false).
    Refuses to overwrite an existing config unless ``force``."""
    path = path.resolve()
    if path.exists() and not path.is_dir():
        raise BrewError(f"{path} is a file; pass a folder")
    config = path / CONFIG_FILE
    if config.exists() and not force:  # running init again is a common slip, not an error
        return InitResult(root=path, already=True)
    top = _repo_top(path) if path.exists() else None
    if top is not None and top != path:
        raise BrewError(
            f"{path} is inside the git repository {top}; a KB's brewkb.toml lives at the "
            f"repository root: run `brewkb init {top}`"
        )
    created: list[str] = []
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BrewError(f"cannot create {path}: {exc.strerror}; pass a folder you can write to") from None
    initialised = top is None
    if initialised:
        GitStore.init(path).close()
        created.append(".git/")
    write_atomic(config, DEFAULT_TOML)
    created.append(CONFIG_FILE)
    for folder in ("recipes", "runs"):
        if not (path / folder).is_dir():
            (path / folder).mkdir()
            (path / folder / ".gitkeep").touch()
            created.append(f"{folder}/")
    ignore = path / ".gitignore"
    existing = ignore.read_text().splitlines() if ignore.exists() else []
    missing = [line for line in GITIGNORE_LINES if line not in existing]
    if missing:
        text = "\n".join(existing + ([""] if existing else []) + missing) + "\n"
        write_atomic(ignore, text)
        created.append(".gitignore")
    committed = _first_commit(path, created) if commit else None
    return InitResult(root=path, created=created, git_initialised=initialised, commit=committed)


def _first_commit(root: Path, created: list[str]) -> str | None:
    """In a repository without commits, commit the files ``init`` wrote (and
    nothing else) so ``brewkb refine`` has a base revision at once. A repository
    with history is left for its owner to commit."""
    paths = [name.rstrip("/") + ("/.gitkeep" if name.endswith("/") else "") for name in created if name != ".git/"]
    with GitStore(root, search_parent=False) as store:
        try:
            store.head_commit()
            return None
        except GitError:  # no commits yet
            pass
        return store.commit_paths(paths, "Start a brewkb knowledge base") if paths else None


def lint(paths: list[Path], *, start: Path = Path("."), fix: bool = False, rev: str | None = None,
         fixed: list[Path] | None = None, checked: list[Path] | None = None) -> list[Problem]:
    """Lint recipe files or folders; without paths, the KB's recipes folder
    (where a recipe in a sub-folder, which no command reads, is a warning);
    with ``rev``, the recipes folder of that revision (a PR branch), as git holds it.
    ``fix`` removes UTF-8 byte-order marks first (the only change lint makes);
    the files it changed are appended to ``fixed`` when it is given, the files
    it read to ``checked``."""
    scrubber = None
    nested: list[Problem] = []
    max_kb = KBConfig().max_recipe_kb
    known: Signatures = {}
    if rev is not None:
        if paths or fix:
            raise BrewError("--rev lints the recipes a revision holds: pass no paths and no --fix with it")
        with KB.open(start, require_kb=True) as kb:
            files = kb.store.read_folder(kb.store.resolve(rev), kb.recipes_prefix())
            shown = {f"{rev}:{name}": data for name, data in files.items()}
            if checked is not None:
                checked.extend(Path(name) for name in shown)
            return lint_files(shown, scrubber_of(kb.config.scrub), kb.config.kb.max_recipe_kb,
                              known=kb.config.tools.signatures)
    if not paths:
        with KB.open(start) as kb:
            paths = [Path(os.path.relpath(kb.recipes_dir))]
            if not kb.recipes_dir.is_dir():
                raise BrewError(f"{kb.recipes_dir} does not exist; run `brewkb init` or pass paths")
            scrubber = scrubber_of(kb.config.scrub)
            folder = kb.config.kb.recipes_dir.strip("/")
            nested = [Problem(str(paths[0] / path), 1, "warning",
                              f"in a sub-folder of {folder}/: brewkb reads only the files directly in {folder}/",
                              f"move it to {folder}/{path.name}") for path in kb.nested_recipe_files()]
            max_kb, known = kb.config.kb.max_recipe_kb, kb.config.tools.signatures
    elif (Path(start) / CONFIG_FILE).is_file():
        config = load_config(Path(start))
        scrubber, max_kb, known = scrubber_of(config.scrub), config.kb.max_recipe_kb, config.tools.signatures
    if fix:
        changed = fix_bom(paths)
        if fixed is not None:
            fixed.extend(changed)
    if checked is not None:
        checked.extend(recipe_files(paths))
    return sorted(lint_paths(paths, scrubber, max_kb, known) + nested, key=lambda p: (p.path, p.line, p.message))


def show(name: str, *, rev: str | None = None, start: Path = Path(".")) -> Recipe:
    """One recipe by name from the working tree or a revision."""
    with KB.open(start, require_kb=True) as kb:
        return kb.recipe(name, rev)
