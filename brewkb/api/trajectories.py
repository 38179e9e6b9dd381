"""``import``: bring existing trajectories into a run.

Records are read and written one at a time, so a file of any size imports in
about the memory of its largest record: the new trajectories go to a
temporary file beside ``rollouts.jsonl``, which replaces it (the trajectories
already there first) only when the whole file was read. Without
``--skip-bad`` the first bad record stops the import and nothing changes.

Every record passes the trust boundary (``brewkb.trajectories.boundary``)
before it is written: normalised, bounded and scrubbed of secrets and
personal data, so no run folder holds them; at the end of an import the ids
its records named are replaced in every trajectory of the run. A record is
recognised when it is imported again by a key of what the log held (kept in
``meta.import_key``), so a repeated import adds nothing and an outcomes file
still attaches to it.
"""

from __future__ import annotations

import logging
import shutil
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from brewkb.config import CONFIG_FILE, ScrubConfig
from brewkb.envs.base import SPLITS
from brewkb.errors import TrajectoryError
from brewkb.events import Event, EventSink, null_sink
from brewkb.fsutil import atomic_writer
from brewkb.kb import KB
from brewkb.recipes import slugify
from brewkb.run.folder import STAGES, Run
from brewkb.run.recordings import SERVE_FOLDER
from brewkb.trajectories.boundary import RunIds, admit
from brewkb.trajectories.formats import Item, Skipped, import_file
from brewkb.trajectories.formats.serve import OUTCOMES_SUFFIX
from brewkb.trajectories.outcomes import Labels, read_outcomes
from brewkb.trajectories.schema import COPY_KEY, UNNAMED_TASK, Outcome, Trajectory, content_id, read_jsonl, tool_calls
from brewkb.trajectories.scrub import Scrubber, scrubber_of
from brewkb.trajectories.tools import not_the_agents, undeclared

__all__ = ["ImportResult", "import_trajectories", "import_recordings", "recorded_conversations", "ROLLOUTS",
           "PROGRESS_EVERY"]

log = logging.getLogger(__name__)
ROLLOUTS = "rollouts.jsonl"
PROGRESS_EVERY = 1000
"""Records between two progress notes."""


@dataclass(frozen=True)
class ImportResult:
    run: str
    imported: int
    skipped: int
    success_rate: float | None
    """Over the labelled trajectories imported; ``None`` when none is labelled."""
    unlabelled: int = 0
    labels_attached: int = 0
    relabelled: int = 0
    """Trajectories already in the run whose outcome the outcomes file changed."""
    unmatched_labels: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    already: int = 0
    """Trajectories of the file the run already held (an import repeated adds none)."""
    total: int = 0
    """Trajectories the run holds after the import (more than ``imported``: it added to earlier imports)."""
    never_ran: int = 0
    """Records of conversations that never took place (a τ² simulation its harness could not run): skipped."""
    repeated: int = 0
    """Records of the file that repeat an earlier record of it (the same conversation twice): kept once."""
    tools: dict[str, int] = field(default_factory=dict)
    """Tool name → the imported conversations that called it."""
    not_known: list[str] = field(default_factory=list)
    """The tools called that ``tools.known`` does not list, when it lists the agent's tools."""
    undeclared: dict[str, int] = field(default_factory=dict)
    """Tool name → the imported conversations that called it though their requests did not declare it."""

    def to_json(self) -> dict[str, object]:
        return {"run": self.run, "imported": self.imported, "skipped": self.skipped, "already": self.already,
                "total": self.total,
                "success_rate": None if self.success_rate is None else round(self.success_rate, 6),
                "unlabelled": self.unlabelled, "labels_attached": self.labels_attached,
                "relabelled": self.relabelled, "unmatched_labels": len(self.unmatched_labels),
                "never_ran": self.never_ran, "repeated": self.repeated, "tools": self.tools,
                "not_known": self.not_known, "undeclared": self.undeclared}


IMPORT_KEY = "import_key"


def _copy_key(t: Trajectory) -> str:
    """What copies of one conversation share, whatever task ids a log gives them: its messages without the ids
    of its tool calls (a logger makes new ones for every conversation) and with their spacing evened out."""
    def plain(message: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in message.items() if k != "tool_call_id"}
        if isinstance(out.get("content"), str):
            out["content"] = " ".join(out["content"].split())
        if isinstance(out.get("tool_calls"), list):
            out["tool_calls"] = [{k: v for k, v in c.items() if k != "id"} if isinstance(c, dict) else c
                                 for c in out["tool_calls"]]
        return out

    return content_id([plain(dict(m)) for m in t.messages])


def _key(t: Trajectory) -> str:
    """The conversation apart from its outcome, as the log held it (kept in
    ``meta`` when it is admitted): a label attached later replaces it, never duplicates it.
    A conversation ``brewkb serve`` recorded is the same conversation when it has grown since."""
    kept = t.meta.get(IMPORT_KEY)
    if isinstance(kept, str):
        return kept
    if t.meta.get("source") == "serve" and isinstance(t.meta.get("conversation_id"), str):
        return content_id({"serve": t.meta["conversation_id"]})
    # a line that named no task was keyed by its number alone before its task id held a digest too
    task_id = f"line-{t.meta.get('line')}" if t.meta.get(UNNAMED_TASK) is True else t.task_id
    return content_id({"task_id": task_id, "task": t.task, "messages": list(t.messages),
                       "relabelled_from": t.relabelled_from, "kb": t.kb.recipes})


def import_trajectories(path: Path, fmt: str, *, run: str | None = None, split: str = "train",
                        tasks: Path | None = None, skip_bad: bool = False, outcomes: Path | None = None,
                        events: EventSink = null_sink, start: Path = Path(".")) -> ImportResult:
    """Convert ``path`` and add its trajectories to the run's ``rollouts.jsonl``,
    with the labels of ``outcomes`` attached. Without ``skip_bad`` a bad record
    stops the import and nothing is written; trajectories already in the run
    are kept, and re-importing adds no duplicates."""
    if split == "test":
        raise TrajectoryError("test-split trajectories are held out from a run's stages, so they cannot be "
                              "imported into one; import them as --split train or eval, or keep them for "
                              "`brewkb eval --split test`")
    if split not in SPLITS:
        raise TrajectoryError(f"split {split!r} is not one of {', '.join(SPLITS)}")
    labels = read_outcomes(outcomes) if outcomes is not None else None
    items = import_file(path, fmt, split, tasks)
    with KB.open(start) as kb:
        if kb.store.work_tree is not None and not (kb.root / CONFIG_FILE).is_file():
            log.warning("%s is not a brewkb KB yet (no %s): the logs go into %s, and `brewkb init` makes it one "
                        "before `brewkb distill`", kb.root, CONFIG_FILE, kb.runs_dir)
        run_id = run or _serve_run(path, fmt) or f"import-{slugify(path.stem)}"
        new_folder = not (kb.runs_dir / run_id).is_dir()
        target = Run.at(kb.runs_dir, run_id, create=True)
        try:
            with target.lock("import"):
                _check_importable(target)
                result = _import(target, path, fmt, items, labels, skip_bad, events,
                                 scrubber_of(kb.config.scrub), kb.config.scrub.max_text)
                known = kb.config.tools.signatures
                return replace(result, not_known=[name for name in result.tools if not_the_agents(name, known)])
        except BaseException:
            if new_folder:  # a failed import into a new run leaves no empty run behind
                shutil.rmtree(target.path, ignore_errors=True)
            raise


def _serve_run(path: Path, fmt: str) -> str | None:
    """A serve run's recordings go into that run by default."""
    if fmt != "serve":
        return None
    folder = path.resolve()
    return (folder.parent if folder.name == SERVE_FOLDER else folder).name


def _recording(target: Run) -> bool:
    """Whether ``target`` is a serve run that takes the conversations recorded so far."""
    folder = target.file(SERVE_FOLDER)
    return target.imported_from() == "serve" and folder.is_dir() and \
        any(not p.name.endswith(OUTCOMES_SUFFIX) for p in folder.glob("*.jsonl")) and \
        all(stage == "rollouts" for stage in target.manifest()["stages"])


def import_recordings(target: Run, scrub: ScrubConfig, events: EventSink = null_sink) -> ImportResult | None:
    """What ``brewkb serve`` recorded into ``target`` so far, imported into it
    (``distill`` does this first; the caller holds the run's lock). ``None``
    when it is no serve run, or its stages have gone on past the import."""
    if not _recording(target):
        return None
    items = import_file(target.path, "serve")
    # a line being written is skipped
    return _import(target, target.path, "serve", items, None, True, events, scrubber_of(scrub), scrub.max_text)


def recorded_conversations(target: Run) -> list[Trajectory]:
    """The conversations ``import_recordings`` would add, read without writing anything."""
    if not _recording(target):
        return []
    return [t for t in import_file(target.path, "serve") if isinstance(t, Trajectory)]


def _check_importable(target: Run) -> None:
    """Refuse to add logs to a run whose trajectories came from an agent, or
    whose later stages have used the ones it has (they would be out of date)."""
    if target.ran_an_agent():
        raise TrajectoryError(f"run {target.id} is a refine run (its trajectories are its agent's episodes); "
                              "import logs into a run of their own: --run NEW")
    done = target.manifest()["stages"]
    later = [stage for stage in (*STAGES, "search") if stage in done and stage != "rollouts"]
    if later:
        # a serve run's folder holds the server's recordings: never advise deleting it
        way = (f"import the recordings into a new run: `brewkb import runs/{target.id} --format serve --run NEW` "
               f"(they stay in runs/{target.id}/serve/)" if target.file(SERVE_FOLDER).is_dir() else
               f"import them into a new run (--run NEW), or delete {target.path} and import everything again")
        raise TrajectoryError(f"run {target.id} has gone on past its import ({', '.join(later)}): new logs would "
                              f"leave those stages out of date; {way}")


def _import(target: Run, path: Path, fmt: str, items: Iterator[Item], labels: Labels | None, skip_bad: bool,
            events: EventSink, scrubber: Scrubber, max_text: int) -> ImportResult:
    rollouts = target.file(ROLLOUTS)
    existing: dict[str, tuple[str, int, Outcome]] = {}  # key -> (id, line, outcome)
    unknown_before: set[int] = set()
    task_of: dict[str, str] = {}  # copy key -> the task of the first conversation with those messages (to say so)
    if rollouts.exists():
        for line, t in enumerate(read_jsonl(rollouts)):
            existing[_key(t)] = (t.id, line, t.outcome)
            if t.success is None:
                unknown_before.add(line)
            if isinstance(t.meta.get(COPY_KEY), str):
                task_of.setdefault(t.meta[COPY_KEY], t.task_id)
    seen: set[str] = set()
    ids = RunIds()
    replaced: set[int] = set()
    skipped: list[str] = []
    never_ran: list[str] = []
    added = wins = unlabelled = attached = already = read = repeated = copies = 0
    tools: Counter[str] = Counter()
    made_up: Counter[str] = Counter()
    with atomic_writer(rollouts) as out:
        if rollouts.exists():
            with rollouts.open(encoding="utf-8") as old:
                for text in old:
                    if text.strip():
                        out.write(text if text.endswith("\n") else text + "\n")
        for item in items:
            if read and read % PROGRESS_EVERY == 0:  # said once the records counted are done
                events(Event("note", "import", done=read, successes=wins,
                             message=f"{read:,} records read, {added:,} new, {len(skipped):,} skipped"))
            read += 1
            if isinstance(item, Skipped) and item.never_ran:
                never_ran.append(f"{item.where}: {item.reason}")
                continue
            if isinstance(item, Skipped):
                if not skip_bad:
                    raise TrajectoryError(f"{item.where}: {item.reason} (nothing was imported; use --skip-bad "
                                          "to skip bad records)")
                skipped.append(f"{item.where}: {item.reason}")
                continue
            trajectory = labels.label(item) if labels is not None else item
            attached += trajectory is not item
            key = _key(trajectory)
            if key in seen:
                repeated += 1
                continue
            seen.add(key)
            if key in existing:
                old_id, old_line, old_outcome = existing[key]
                if trajectory.success is None and old_line not in unknown_before:
                    trajectory = trajectory.derived(outcome=old_outcome)  # a label is never lost
                if old_id == trajectory.id:
                    already += 1
                    continue
                replaced.add(old_line)
            copy = _copy_key(trajectory)
            copies += task_of.setdefault(copy, trajectory.task_id) != trajectory.task_id
            ids.add(trajectory, scrubber)
            admitted = admit(trajectory, scrubber, max_text)
            out.write(admitted.with_(meta={**admitted.meta, IMPORT_KEY: key, COPY_KEY: copy}).to_line() + "\n")
            added += 1
            tools.update({call.name for call in tool_calls(admitted.messages)})
            made_up.update({call.name for call in tool_calls(trajectory.messages) if undeclared(call.name, trajectory)})
            wins += trajectory.success is True
            unlabelled += trajectory.success is None
    if not (added or already):  # refused: the run folder a failed import made goes with it
        left_out = skipped + never_ran
        why = (f"all {len(left_out)} records were skipped; the first: {left_out[0]}" if left_out else
               "it holds no records")
        raise TrajectoryError(f"nothing to import from {path}: {why}; check that it is a --format {fmt} file "
                              "(docs/trajectories.md shows each format)")
    if copies:
        log.warning("%d conversation(s) repeat the messages of another of a different task: support for a recipe "
                    "counts copies of one conversation as one task", copies)
    if replaced:
        _drop_lines(rollouts, replaced, keep_last=added)
    if ids.found:  # ids are data wherever they stand: in the run's other conversations too
        with atomic_writer(rollouts) as out:
            for t in read_jsonl(rollouts):
                out.write(ids.trajectory(t).to_line() + "\n")
    labelled = added - unlabelled
    total = len(existing) - len(replaced) + added
    target.record_stage("rollouts", source=f"import:{fmt}", file=str(path), trajectories=total,
                        skipped=len(skipped), never_ran=len(never_ran),
                        unlabelled=len(unknown_before - replaced) + unlabelled)
    return ImportResult(target.id, added, len(skipped), wins / labelled if labelled else None, unlabelled,
                        attached, len(replaced), labels.unused() if labels else [], skipped, already, total,
                        len(never_ran), repeated, dict(sorted(tools.items())), undeclared=dict(sorted(made_up.items())))


def _drop_lines(path: Path, lines: set[int], keep_last: int) -> None:
    """Rewrite ``path`` without the given lines of its old part (the trajectories
    a newly attached label replaces); the last ``keep_last`` lines are new."""
    with path.open(encoding="utf-8") as handle:
        total = sum(1 for line in handle if line.strip())
    old = total - keep_last
    with atomic_writer(path) as out, path.open(encoding="utf-8") as handle:
        index = 0
        for line in handle:
            if not line.strip():
                continue
            if index >= old or index not in lines:
                out.write(line)
            index += 1
