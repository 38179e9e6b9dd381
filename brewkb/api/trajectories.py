"""``import``: bring existing trajectories into a run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from brewkb.envs.base import SPLITS
from brewkb.errors import TrajectoryError
from brewkb.kb import KB
from brewkb.recipes import slugify
from brewkb.run.folder import Run
from brewkb.trajectories.importers import Skipped, import_file

__all__ = ["ImportResult", "import_trajectories", "ROLLOUTS"]

ROLLOUTS = "rollouts.jsonl"


@dataclass(frozen=True)
class ImportResult:
    run: str
    imported: int
    skipped: int
    success_rate: float
    """Of the trajectories this import added (0.0 when it added none)."""
    errors: list[str] = field(default_factory=list)
    already: int = 0
    """Trajectories of the file the run already held (an import repeated adds none)."""

    def to_json(self) -> dict[str, object]:
        return {"run": self.run, "imported": self.imported, "skipped": self.skipped,
                "success_rate": round(self.success_rate, 6)}


def import_trajectories(path: Path, fmt: str, *, run: str | None = None, split: str = "train",
                        tasks: Path | None = None, skip_bad: bool = False, start: Path = Path(".")) -> ImportResult:
    """Convert ``path`` and add its trajectories to the run's ``rollouts.jsonl``.
    Without ``skip_bad`` a bad record stops the import and nothing is written;
    trajectories already in the run are kept, and re-importing adds no duplicates."""
    if split == "test":
        raise TrajectoryError("test-split trajectories are held out from a run's stages, so they cannot be "
                              "imported into one; import them as --split train or eval, or keep them for "
                              "`brewkb eval --split test`")
    if split not in SPLITS:
        raise TrajectoryError(f"split {split!r} is not one of {', '.join(SPLITS)}")
    new, skipped = [], []
    for item in import_file(path, fmt, split, tasks):
        if isinstance(item, Skipped):
            if not skip_bad:
                raise TrajectoryError(f"{item.where}: {item.reason} (nothing was imported; use --skip-bad "
                                      "to skip bad records)")
            skipped.append(f"{item.where}: {item.reason}")
        else:
            new.append(item)
    if not new:  # refused before a run folder exists: an empty run would only show up in `brewkb runs`
        why = (f"all {len(skipped)} records were skipped; the first: {skipped[0]}" if skipped else
               "it holds no records")
        raise TrajectoryError(f"nothing to import from {path}: {why}; check that it is a --format {fmt} file "
                              "(docs/trajectories.md shows each format)")
    with KB.open(start) as kb:
        run_id = run or f"import-{slugify(path.stem)}"
        target = Run.at(kb.runs_dir, run_id, create=True)
        existing = target.read_trajectories(ROLLOUTS)
        seen = {t.id for t in existing}
        added = [t for t in new if t.id not in seen and not seen.add(t.id)]  # type: ignore[func-returns-value]
        target.write_trajectories(ROLLOUTS, existing + added)
        all_runs = existing + added
        target.record_stage("rollouts", source=f"import:{fmt}", file=str(path), trajectories=len(all_runs),
                            skipped=len(skipped))
    rate = sum(t.success for t in added) / len(added) if added else 0.0
    return ImportResult(run_id, len(added), len(skipped), rate, skipped, len(new) - len(added))
