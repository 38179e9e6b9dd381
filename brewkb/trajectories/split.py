"""The held-out parts of logged conversations, chosen by task: the tasks in
the order of a content hash of their ids, every ``HOLD_OUT_EVERY``-th from the
first the *eval* split (what ``distill``'s search and its gate measure recipes
on), every ``HOLD_OUT_EVERY``-th from the second the *test* split (the PR's
evidence, which no stage of the run ever reads); the rest is learned from.

The eval split then asks for every action the learning tasks can teach: an
action (a write or a hand-off) that more than ``keep`` learning tasks
performed, and no eval task, has one of those tasks moved to the eval split
(the first in the order whose every action keeps ``keep`` learning tasks, or
never had them; the rarest actions first), as many tasks at most as the hash
held out for eval, so conversations that make actions up cannot empty the
learning split. Without it a concept learned from several tasks would wait for want of a
held-out request (a recipe is never scored on the requests it was learned
from). The test split is the hash's alone.

Every trial of a task stays on one side, and the same logs always give the
same split. Logs of more tasks give another one: a task's place in the order
moves when tasks join it, so a task one run learned from can be held out by a
run on a larger log.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence

from brewkb.trajectories.schema import content_id

__all__ = ["HOLD_OUT_EVERY", "split_tasks"]

HOLD_OUT_EVERY = 5
"""One logged task in this many is held out for eval, another for test (at least this many tasks are needed)."""


def split_tasks(task_ids: Sequence[str], actions: Mapping[str, Collection[str]] | None = None,
                keep: int = 1) -> tuple[set[str], set[str]]:
    """The eval and the test task ids (both empty below ``HOLD_OUT_EVERY``
    tasks); ``actions``: task id → the actions its conversations that did
    not fail performed."""
    distinct = sorted(set(task_ids), key=lambda t: (content_id(["held-out", t]), t))
    if len(distinct) < HOLD_OUT_EVERY:
        return set(), set()
    evaluation, test = set(distinct[::HOLD_OUT_EVERY]), set(distinct[1::HOLD_OUT_EVERY])
    return evaluation | _asked_for(distinct, evaluation, test, actions or {}, max(1, keep)), test


def _asked_for(order: Sequence[str], evaluation: set[str], test: set[str], actions: Mapping[str, Collection[str]],
               keep: int) -> set[str]:
    """The learning tasks to move to the eval split so that it asks for every
    action more than ``keep`` learning tasks performed."""
    learning = [t for t in order if t not in evaluation | test]
    count = Counter(a for t in learning for a in set(actions.get(t, ())))
    asked = {a for t in evaluation for a in actions.get(t, ())}
    moved: set[str] = set()
    for action in sorted(count, key=lambda a: (count[a], a)):
        if len(moved) == len(evaluation):  # at most as many as the hash held out: logs cannot empty the learning split
            break
        if action in asked or count[action] <= keep:
            continue
        # a task whose other actions have support to lose (just ``keep`` tasks) stays; one that made an action too
        # few tasks made (a made-up one, say) can still go
        task = next((t for t in learning if t not in moved and action in actions.get(t, ())
                     and all(count[a] != keep for a in set(actions[t]))), None)
        if task is not None:
            moved.add(task)
            asked.update(actions[task])
            count.subtract(set(actions[task]))
    return moved
