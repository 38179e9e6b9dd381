"""A knowledge base: a git repository, its ``brewkb.toml`` and its recipes.

Recipes are read from the working tree (hand edits show at once) or from any
revision through the git store, never by checking anything out. A recipe is
a regular file of the recipes folder: a link that leads outside the folder
(or, in a revision, any symbolic link) is never read, by any reader.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from brewkb.config import CONFIG_FILE, Config, load_config, parse_config
from brewkb.errors import BrewError, ConfigError, RecipeError
from brewkb.git.store import GitStore
from brewkb.recipes import MAX_NAME, Recipe, is_slug, parse_recipe, read_recipe

__all__ = ["KB", "find_root"]

log = logging.getLogger(__name__)


def find_root(start: Path, top: Path) -> Path:
    """The nearest folder from ``start`` up to the repository top ``top`` that
    holds a ``brewkb.toml``, else ``top``."""
    here = start.resolve()
    for folder in (here, *here.parents):
        if (folder / CONFIG_FILE).is_file():
            return folder
        if folder == top:
            break
    return top


@dataclass
class KB:
    """An open knowledge base. ``store`` is the git store of its repository."""

    root: Path
    config: Config
    store: GitStore

    @classmethod
    def open(cls, start: Path | str = ".", *, require_config: bool = False, require_kb: bool = False) -> KB:
        """The KB that ``start`` is in. In a bare repository the config is read
        from ``HEAD:brewkb.toml`` and only revisions can be read.
        ``require_config``: refuse a work tree without a ``brewkb.toml`` (for
        commands that run an agent or the LLM roles, which would otherwise
        quietly use the defaults: the shop simulation). ``require_kb``: refuse
        a work tree with neither a ``brewkb.toml`` nor a ``recipes/`` folder
        (for commands that only read a KB, which would answer with nothing)."""
        store = GitStore(start)
        if store.work_tree is None:
            config = Config()
            try:
                head = store.head_commit()
            except BrewError:
                head = None
            entry = store.lookup(store.commit_tree(head), CONFIG_FILE) if head else None
            if entry is not None:
                config = parse_config(store.read_blob(entry.sha).decode(), f"HEAD:{CONFIG_FILE}")
            return cls(root=store.git_dir, config=config, store=store)
        root = find_root(Path(start), store.work_tree.resolve())
        # Without a config, a repository is a KB only if it holds a recipes folder (recipes kept by hand with
        # the defaults); any other repository would get an empty answer and a cache folder it never asked for.
        if not (root / CONFIG_FILE).is_file() and (
                require_config or require_kb and not (root / Config().kb.recipes_dir).is_dir()):
            store.close()
            raise ConfigError(f"{Path(start).resolve()} is not in a brewkb KB (no {CONFIG_FILE} there or above, up to {root}); "
                              "run `brewkb init` there first")
        return cls(root=root, config=load_config(root), store=store)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> KB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def recipes_dir(self) -> Path:
        return self.root / self.config.kb.recipes_dir

    @property
    def cache_dir(self) -> Path:
        """The cache folder, created on first use with a ``.gitignore`` of its
        own so it never shows up in ``git status``."""
        folder = self.root / self.config.kb.cache_dir
        if not (folder / ".gitignore").exists():
            folder.mkdir(parents=True, exist_ok=True)
            (folder / ".gitignore").write_text("# created by brewkb: caches are never committed\n*\n")
        return folder

    @property
    def runs_dir(self) -> Path:
        return self.root / self.config.kb.runs_dir

    def recipes_prefix(self) -> str:
        """The recipes folder as a path inside the repository."""
        if self.store.work_tree is None:
            return self.config.kb.recipes_dir.strip("/")
        return self.store.relpath(self.recipes_dir)

    def _md_files(self) -> list[Path]:
        if not self.recipes_dir.is_dir():
            return []
        return sorted(p for p in self.recipes_dir.glob("*.md") if p.is_file() or p.is_symlink())

    def outside(self, path: Path) -> Path | None:
        """Where ``path`` leads when that is outside the recipes folder (a link), else ``None``."""
        target = path.resolve()
        return None if target.is_relative_to(self.recipes_dir.resolve()) and target.is_file() else target

    def recipe_files(self) -> list[Path]:
        """The recipe files of the working tree that can be read (not links leading outside the folder)."""
        return [p for p in self._md_files() if self.outside(p) is None]

    def nested_recipe_files(self) -> list[Path]:
        """Markdown files in sub-folders of the recipes folder (relative to
        it): no reader takes them, so they are named in warnings."""
        if not self.recipes_dir.is_dir():
            return []
        return sorted(p.relative_to(self.recipes_dir) for p in self.recipes_dir.rglob("*.md")
                      if p.parent != self.recipes_dir and p.is_file()
                      and not any(part.startswith(".") for part in p.relative_to(self.recipes_dir).parts))

    def recipe_file_names(self, rev: str | None = None) -> list[str]:
        """The names of the recipe files (``x.md``) of the working tree or a
        revision, read or not (badly named ones and links included)."""
        if rev is None:
            return [p.name for p in self._md_files()]
        entry = self.store.lookup(self.store.commit_tree(self.store.resolve(rev)), self.recipes_prefix())
        return sorted(e.name for e in self.store.read_tree(entry.sha) if e.name.endswith(".md")) if entry else []

    def uncommitted(self, who: str = "the run") -> list[str]:
        """What a run that starts from ``HEAD`` (``who``: "the server" for one that serves a
        revision) leaves out or takes from the working tree: one line per recipe file or config
        that is not as committed."""
        if self.store.work_tree is None:
            return []
        config, lines = self.store.relpath(self.root / CONFIG_FILE), []
        for path, state in self.store.uncommitted([self.recipes_prefix(), config]):
            if path == config:
                lines.append(f"{path} has uncommitted changes: {who} uses them as they are now (commit them to "
                             "keep them with the KB)")
            elif state == "untracked":
                lines.append(f"{path} is not committed: {who} starts from HEAD without it (commit it to include it)")
            elif state == "deleted":
                lines.append(f"{path} is deleted but not committed: {who} starts from HEAD, which has it")
            else:
                lines.append(f"{path} has uncommitted changes: {who} starts from HEAD's version (commit them to "
                             "include them)")
        return lines

    def recipes(self, rev: str | None = None) -> list[Recipe]:
        """All recipes of the working tree (``rev=None``) or of a revision.
        A file that does not parse, or whose ``name`` is not a slug equal to its
        file stem, is skipped with a warning (``brewkb lint`` explains it): every
        reader — search, show, index, MCP, export — sees only well-named recipes."""
        found: list[Recipe] = []
        if rev is None:
            self.store.require_work_tree()
            for path in self._md_files():
                if (target := self.outside(path)) is not None:
                    log.warning("skipping %s: it leads to %s, outside %s; recipes are files of that folder (run "
                                "`brewkb lint`)", path, target, self.config.kb.recipes_dir)
                    continue
                try:
                    recipe = read_recipe(path)
                except RecipeError as exc:
                    log.warning("skipping %s (run `brewkb lint`)", exc)
                    continue
                if _well_named(recipe, path.stem, str(path)):
                    found.append(recipe)
            for nested in self.nested_recipe_files():
                log.warning("ignoring %s: recipes in sub-folders are not read; move it to %s/%s (see `brewkb lint`)",
                            self.recipes_dir / nested, self.config.kb.recipes_dir.strip("/"), nested.name)
            return found
        commit = self.store.resolve(rev)
        files = self.store.read_folder(commit, self.recipes_prefix())
        for name in sorted(set(self.recipe_file_names(rev)) - {Path(f).name for f in files}):
            log.warning("skipping %s at %s: it is a symbolic link or not a file; recipes are files of %s",
                        name, rev, self.config.kb.recipes_dir)
        for name, data in sorted(files.items()):
            try:
                recipe = parse_recipe(data.decode("utf-8"))
            except (RecipeError, UnicodeDecodeError) as exc:
                log.warning("skipping %s at %s: %s", name, rev, exc)
                continue
            if _well_named(recipe, Path(name).stem, f"{name} at {rev}"):
                found.append(recipe)
        return found

    def recipe(self, name: str, rev: str | None = None) -> Recipe:
        if not is_slug(name):
            # the files' names, without reading (and warning about) every file
            stems = [n.removesuffix(".md") for n in self.recipe_file_names(rev) if is_slug(n.removesuffix(".md"))]
            listed = f"; recipes: {', '.join(stems[:10])}{' …' if len(stems) > 10 else ''}" if stems else ""
            raise BrewError(f"{_short(name)} is not a recipe name: names are lowercase letters, digits and single "
                            f"hyphens, at most {MAX_NAME} characters{listed}")
        by_name = {r.name: r for r in self.recipes(rev)}
        if name in by_name:
            return by_name[name]
        import difflib

        close = difflib.get_close_matches(name, by_name, n=3)
        hint = (f"; did you mean {', '.join(close)}?" if close else
                f"; recipes: {', '.join(sorted(by_name)[:10])}{' …' if len(by_name) > 10 else ''}" if by_name else
                f"; there are no recipes yet: write one in {self.config.kb.recipes_dir}/, learn them with "
                "`brewkb distill RUN` (logs) or `brewkb refine`, or read a run's with `--rev brew/RUN/pr`")
        link = self.recipes_dir / f"{name}.md"
        if rev is None and (link.is_file() or link.is_symlink()) and self.outside(link) is not None:
            hint = (f"; {self.config.kb.recipes_dir}/{name}.md leads to {self.outside(link)}, outside the recipes "
                    "folder, and is not read: put the recipe's text in the file itself")
        elif rev is None and (self.recipes_dir / f"{name}.md").is_file():
            hint = (f"; {self.config.kb.recipes_dir}/{name}.md was skipped because its front matter is not "
                    "valid or its name is not the file's name: run `brewkb lint` to see why")
        where = f"at {rev}" if rev else "in the working tree"
        raise BrewError(f"no recipe named {name!r} {where}{hint}")


def _short(name: str) -> str:
    return repr(name) if len(name) <= 80 else f"{name[:60]!r}... ({len(name)} characters)"


def _well_named(recipe: Recipe, stem: str, where: str) -> bool:
    """Whether a recipe's name is a slug equal to its file stem; warns when not."""
    if is_slug(recipe.name) and recipe.name == stem:
        return True
    problem = "is not a valid slug" if not is_slug(recipe.name) else f"differs from the file name {stem!r}"
    log.warning("skipping %s: its name %s %s (run `brewkb lint`)", where, _short(recipe.name), problem)
    return False
