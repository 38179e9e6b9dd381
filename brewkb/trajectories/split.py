"""The held-out parts of logged conversations, chosen by task: the tasks in
the order of a content hash of their ids, every ``HOLD_OUT_EVERY``-th from the
first the *eval* split (what ``distill``'s search and its gate measure recipes
on), every ``HOLD_OUT_EVERY``-th from the second the *test* split (the PR's
evidence, which no stage of the run ever reads); the rest is learned from.

Every trial of a task stays on one side, and the same tasks always give the
same split. Logs of more tasks give another one: a task's place in the order
moves when tasks join it, so a task one run learned from can be held out by a
run on a larger log.
"""

from __future__ import annotations

from collections.abc import Sequence

from brewkb.trajectories.schema import Trajectory, content_id

__all__ = ["HOLD_OUT_EVERY", "split_tasks", "split_logs"]

HOLD_OUT_EVERY = 5
"""One logged task in this many is held out for eval, another for test (at least this many tasks are needed)."""


def split_tasks(task_ids: Sequence[str]) -> tuple[set[str], set[str]]:
    """The eval and the test task ids (both empty below ``HOLD_OUT_EVERY`` tasks)."""
    distinct = sorted(set(task_ids), key=lambda t: (content_id(["held-out", t]), t))
    if len(distinct) < HOLD_OUT_EVERY:
        return set(), set()
    return set(distinct[::HOLD_OUT_EVERY]), set(distinct[1::HOLD_OUT_EVERY])


def split_logs(logged: Sequence[Trajectory]) -> tuple[list[Trajectory], list[Trajectory], list[Trajectory]]:
    """The conversations learned from, the eval ones and the test ones."""
    evaluation, test = split_tasks([t.task_id for t in logged])
    return ([t for t in logged if t.task_id not in evaluation | test], [t for t in logged if t.task_id in evaluation],
            [t for t in logged if t.task_id in test])
