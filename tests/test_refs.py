from __future__ import annotations

import pytest

from brewkb.errors import GitError
from brewkb.git.refs import BrewRef


@pytest.mark.parametrize(
    "ref",
    [BrewRef.for_node("run-1", "cancel-order", 12), BrewRef.kb("2026.11.21_a"), BrewRef.pr("r")],
)
def test_format_and_parse_round_trip(ref: BrewRef) -> None:
    assert BrewRef.parse(str(ref)) == ref


def test_node_ref_format() -> None:
    ref = BrewRef.for_node("r1", "cancel-order", 3)
    assert str(ref) == "refs/heads/brew/r1/cancel-order/n3"
    assert ref.short == "brew/r1/cancel-order/n3"
    assert BrewRef.run_prefix("r1") == "refs/heads/brew/r1/"


@pytest.mark.parametrize(
    "bad",
    ["refs/heads/main", "refs/heads/brew/r1/x/3", "refs/heads/brew/r1/Cancel/n1", "refs/heads/brew/../kb",
     "refs/heads/brew/r1/kb/n1", "refs/heads/brew/r1/a/b/n1"],
)
def test_parse_refuses_other_refs(bad: str) -> None:
    with pytest.raises(GitError):
        BrewRef.parse(bad)


@pytest.mark.parametrize("run", ["", "a b", "../x", "x.lock", "-x", "a/b"])
def test_run_ids_must_be_ref_safe(run: str) -> None:
    with pytest.raises(GitError, match="not usable in a git ref"):
        BrewRef.kb(run)
