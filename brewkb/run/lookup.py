"""Why a run has no search in this repository, said the same way by every
command that reads a run's branches (``tree``, ``gc``, ``pr``, ``report``):
an unknown name lists the runs (with the closest one), a run that was only
imported says to distil it, a stopped one says how to continue, a running one
names its process, and a run folder whose branches are elsewhere (a published
copy, a clone that did not fetch them) says where its report is."""

from __future__ import annotations

import difflib

from brewkb.errors import RunError
from brewkb.git.refs import PREFIX, BrewRef, refs_of_kind
from brewkb.kb import KB
from brewkb.run.folder import LOCK, MANIFEST, Run, holder

__all__ = ["require_run", "FETCH"]

FETCH = "git fetch REMOTE 'refs/heads/brew/*:refs/heads/brew/*' 'refs/notes/brew:refs/notes/brew'"


def require_run(kb: KB, run: str, *, need: str = "search") -> None:
    """Return when ``run`` has branches in this repository (``need="search"``)
    or its ``pr`` branch (``need="pr"``); else raise the ``RunError`` that says
    why not and what to do."""
    refs = kb.store.list_refs(BrewRef.run_prefix(run))
    if refs and (need == "search" or str(BrewRef.pr(run)) in refs):
        return
    folder = kb.runs_dir / run
    if not (folder / MANIFEST).is_file() and not refs:
        raise _unknown(kb, run)
    record = Run(run, folder)
    owner = holder(folder / LOCK)
    if owner is not None:
        raise RunError(f"run {run} is in progress (pid {owner.get('pid')}: brewkb {owner.get('command')}); wait "
                       "for it to finish")
    imported = record.imported_from() is not None if (folder / MANIFEST).is_file() else False
    nothing = record.manifest()["stages"].get("search", {}).get("nothing") if not refs else None
    if nothing:
        raise RunError(f"run {run!r} learned nothing, so it has no pr branch: {nothing}")
    finish = f"brewkb distill {run}" if imported else f"brewkb refine --resume {run}"
    if not refs and record.stage_done("search"):
        report = folder / "report.md"
        where = f"its report is {kb.store.relpath(report)}; " if report.is_file() else ""
        raise RunError(f"run {run}'s record is in {kb.store.relpath(folder)}, but its branches are not in this "
                       f"repository (a published copy, or a clone that did not fetch them): {where}fetch them with "
                       f"`{FETCH}`")
    if not refs:
        raise RunError(f"run {run} has no search yet: `{finish}`")
    raise RunError(f"run {run!r} has no pr branch yet; finish it with `{finish}`")


def _unknown(kb: KB, run: str) -> RunError:
    listed = {ref.run for kind in ("kb", "pr") for ref, _ in refs_of_kind(kb.store.list_refs(PREFIX), kind)}
    if kb.runs_dir.is_dir():
        listed |= {p.name for p in kb.runs_dir.iterdir() if (p / MANIFEST).is_file()}
    runs = sorted(listed)
    close = difflib.get_close_matches(run, runs, n=1)
    if close:
        return RunError(f"no run {run!r} in this repository; did you mean {close[0]}? (its runs: {', '.join(runs)})")
    return RunError(f"no run {run!r} in this repository" + (f" (its runs: {', '.join(runs)})" if runs else "")
                    + f"; a run made in another clone is fetched with `{FETCH}`")
