"""What leaves a run: the pull request (``pr``), Agent Skills (``export
skills``). Both read git only, so they work on any clone that fetched the run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from brewkb.errors import BrewError
from brewkb.fsutil import write_atomic
from brewkb.git.refs import NOTES_REF, BrewRef
from brewkb.git.store import parse_trailers
from brewkb.kb import KB
from brewkb.recipes import served
from brewkb.retrieval.ranking import servable
from brewkb.run.prbody import pr_body
from brewkb.run.record import RunView, load_run

__all__ = ["RunView", "load_run", "pr_body", "push_run", "export_skills", "Exported"]


def push_run(kb: KB, run: str, remote: str) -> str:
    """Push every ref of the run (``pr``, ``kb``, node branches, ``archive``)
    and the reward notes, with explicit refspecs, so ``brewkb tree`` and
    ``brewkb pr`` work in a clone that fetches them back with
    ``git fetch REMOTE 'refs/heads/brew/*:refs/heads/brew/*' 'refs/notes/brew:refs/notes/brew'``."""
    refs = [str(BrewRef.pr(run)), str(BrewRef.kb(run))]
    missing = [r for r in refs if kb.store.read_ref(r) is None]
    if missing:
        raise BrewError(f"run {run!r} has no {', '.join(missing)}; finish it with `brewkb refine --resume {run}`")
    prefix = BrewRef.run_prefix(run)
    return kb.store.push(remote, [f"{prefix}*:{prefix}*", f"{NOTES_REF}:{NOTES_REF}"])


def _inside(out: Path, relative: Path) -> Path:
    """``out / relative``, refused unless it resolves inside ``out`` (links included)."""
    base = out.resolve()
    path = (base / relative).resolve()
    if not path.is_relative_to(base):
        raise BrewError(f"refusing to write {path}: it is outside {base}; check the recipe's name with `brewkb lint`")
    return path


@dataclass(frozen=True)
class Exported:
    skills: list[Path]
    """The ``SKILL.md`` files written."""
    skipped: list[str]
    """Recipe files left out because they do not parse or are badly named (``brewkb lint`` says why)."""


def export_skills(kb: KB, out: Path, rev: str | None = None) -> Exported:
    """Each recipe as ``out/<name>/SKILL.md`` in the Agent Skills format; only
    well-named recipes are exported, and nothing is written outside ``out``."""
    recipes = servable(kb, rev)  # as the index and the servers hold them: a recipe over kb.max_recipe_kb is not
    exported = {r.name for r in recipes}
    skipped = [f for f in kb.recipe_file_names(rev) if f.removesuffix(".md") not in exported]
    if not recipes:
        raise BrewError(f"no recipes {'at ' + rev if rev else 'in the working tree'} to export")
    revision = kb.store.resolve(rev) if rev else None
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file where a folder of the path should be, or no permission
        raise BrewError(f"cannot create {out}: {exc.strerror}; pass a folder you can write to") from None
    rewards: dict[str, float] = {}
    if revision is not None:
        run = parse_trailers(kb.store.read_commit(revision)["message"][0]).get("Brew-Run")
        if run:
            view = load_run(kb, run)
            rewards = {c.name: c.final_reward for c in view.changes if c.final_reward is not None}
    planned = []
    for recipe in map(served, recipes):  # what an agent acts on: not the words of the requests it was learned from
        metadata = {"source": "brewkb", "source-revision": revision or "working tree",
                    "concept": recipe.concept or recipe.name}
        if recipe.name in rewards:
            metadata["reward"] = f"{rewards[recipe.name]:.4f}"
        front = {"name": recipe.name, "description": recipe.description.strip(), "metadata": metadata}
        text = "---\n" + yaml.safe_dump(front, sort_keys=False, allow_unicode=True) + "---\n\n" + \
            recipe.body.strip() + "\n"
        planned.append((_inside(out, Path(recipe.name) / "SKILL.md"), text))
    for path, text in planned:  # every destination is checked before anything is written
        write_atomic(path, text)
    return Exported([path for path, _ in planned], skipped)
