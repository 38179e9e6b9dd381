"""``eval --logs``: how well KB revisions and the baselines point an agent to
the right procedure on held-out logged conversations (see
``brewkb.retrieval.logeval`` for the measures).

The learning run is the run whose conversations the KB was distilled from (by
default the logs' own run). Its held-out tasks (the same stable choice
``distill`` makes) are the cases when the logs are its own; logs of another run
are held out whole. The baselines remember what ``distill`` learned from: the
passing conversations of the learning run's learning split (``all-trajectories``
every conversation that is not a test one, the eval split's and failed ones
too). A case is recurring when the learning split holds its task.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from brewkb.config import Config
from brewkb.errors import BrewError, RunError
from brewkb.fsutil import write_atomic
from brewkb.git.refs import BrewRef
from brewkb.kb import KB
from brewkb.retrieval.compare import LogEvaluation
from brewkb.retrieval.logeval import BASELINES, cases_of, compare_arms
from brewkb.retrieval.ranking import retriever_of
from brewkb.stages.concepts import held_out
from brewkb.run.folder import FILES, LOG_EVAL_FILE, Run
from brewkb.trajectories.schema import Trajectory
from brewkb.trajectories.scrub import scrubber_of
from brewkb.trajectories.split import HOLD_OUT_EVERY

__all__ = ["evaluate_logs", "logged_split", "LOG_EVAL_FILE"]

log = logging.getLogger(__name__)



def evaluate_logs(logs: str, *, revs: Sequence[str] = (), contexts: Sequence[str] = (), from_run: str | None = None,
                  save_to: str | None = None, start: Path = Path(".")) -> LogEvaluation:
    """Score KB revisions (``revs``; ``.`` is the working tree) and baselines
    (``contexts``) on the held-out conversations of run ``logs``. With
    neither: every baseline, the base KB and the learning run's PR when it has
    one (else ``HEAD``)."""
    unknown = [c for c in contexts if c not in BASELINES]
    if unknown:
        raise BrewError(f"--context {unknown[0]!r}: on logs use {', '.join(BASELINES)} (a KB is a --rev)")
    with KB.open(start, require_config=True) as kb:
        held_run = _run(kb, logs, "--logs")
        learn_run = _run(kb, from_run, "--from-run") if from_run else held_run
        target = _run(kb, save_to, "--run") if save_to else None
        learn, evaluation, held = logged_split(learn_run, kb.config)
        if learn_run.id != held_run.id:
            held = _logged(held_run)
        if not held:
            raise BrewError(f"run {logs} holds no held-out conversations: logs of fewer than {HOLD_OUT_EVERY} tasks "
                            f"cannot be split; import more, or evaluate other logs against it with "
                            f"`brewkb eval --logs OTHER --from-run {logs}`")
        hint, names = "", {}
        if not revs and not contexts:
            contexts = BASELINES
            revs, hint = _default_revs(kb, learn_run.id)
            names = dict(zip(revs, ["base KB", "new KB"], strict=False))  # as distill and the PR call them
        scrub = scrubber_of(kb.config.scrub)
        cases = cases_of(held, scrub.trajectory, learn, kb.config.tools.signatures)
        kbs = {(f"{names[rev]} ({_label(kb, rev)})" if rev in names else _label(kb, rev)):
               kb.recipes(None if rev in (".", "working-tree") else rev) for rev in revs}
        arms = compare_arms(kbs, learn, cases, retriever_of(kb), scrub.trajectory, contexts, learn + evaluation)
        result = LogEvaluation(logs, learn_run.id, len(held), cases, arms, hint)
        if target is not None:
            if target.file(LOG_EVAL_FILE).exists():
                log.warning("replaced the comparison runs/%s/%s held; the run's report shows this one now", target.id,
                            LOG_EVAL_FILE)
            write_atomic(target.file(LOG_EVAL_FILE), json.dumps(result.to_json(), indent=2) + "\n")
        return result


def _run(kb: KB, run: str, option: str) -> Run:
    try:
        return Run.at(kb.runs_dir, run, create=False)
    except RunError as exc:
        raise RunError(f"{option} {run}: {exc}") from None


def logged_split(run: Run, config: Config) -> tuple[list[Trajectory], list[Trajectory], list[Trajectory]]:
    """A run's logged conversations: those learned from, the eval ones and the
    test ones, as its distillation recorded them (else as it would)."""
    logged = _logged(run)
    record = run.manifest().get("stages", {}).get("rollouts-eval")
    if record is None:
        evaluation, test = held_out(logged, config.stages.min_concept_tasks, config.tools.signatures)
    else:  # a run distilled before test splits existed learned from every task but its eval ones
        evaluation, test = set(record.get("held_out", [])), set(record.get("test", []))
    return ([t for t in logged if t.task_id not in evaluation | test], [t for t in logged if t.task_id in evaluation],
            [t for t in logged if t.task_id in test])


def _logged(run: Run) -> list[Trajectory]:
    if run.ran_an_agent():
        raise BrewError(f"run {run.id} is a refine run, not imported logs: compare KBs on its environment's tasks "
                        "with `brewkb eval --rev REV --split test` (--logs takes a run made by `brewkb import`)")
    logged = run.read_trajectories(FILES["rollouts"])
    if not logged:
        raise BrewError(f"run {run.id} has no trajectories; bring logs in with "
                        f"`brewkb import FILE --format F --run {run.id}`")
    return logged


def _default_revs(kb: KB, run: str) -> tuple[tuple[str, ...], str]:
    """The base KB and the run's PR; ``HEAD`` and what to do next before it has one."""
    pr = str(BrewRef.pr(run))
    branch = pr.removeprefix("refs/heads/")
    if kb.store.read_ref(pr) is None:
        nothing = Run.at(kb.runs_dir, run, create=False).manifest()["stages"].get("search", {}).get("nothing")
        if nothing:  # distilled, and nothing to learn: distilling again would say the same
            return ("HEAD",), f"run {run} was distilled and learned nothing, so it has no KB to compare: {nothing}"
        return ("HEAD",), (f"run {run} has no distilled KB yet (no {branch}): `brewkb distill {run}` learns "
                           "recipes from its logs, then eval again")
    from brewkb.search.store import find_base

    return (find_base(kb.store, run), branch), ""


def _label(kb: KB, rev: str) -> str:
    if rev in (".", "working-tree"):
        return "working tree"
    resolved = kb.store.resolve(rev)
    return resolved[:12] if rev == resolved else rev

