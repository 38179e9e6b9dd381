"""The one channel for what the user asked to see (diagnostics go to logging)."""

from __future__ import annotations

import json
from typing import Any

import click


def echo(text: str = "") -> None:
    click.echo(text)


def plural(n: int, one: str, many: str = "") -> str:
    """``n`` and the word: ``one`` when ``n`` is 1, else ``many`` (default: ``one`` and an s)."""
    return f"{n} {one if n == 1 else many or one + 's'}"


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def note(text: str) -> None:
    """A remark for a human, on stderr so it never mixes with data on stdout."""
    click.echo(text, err=True)


def echo_plan_calls(plan: Any) -> None:
    """A plan's LLM calls, by role, and its concepts (``refine --plan``, ``distill --plan``)."""
    echo(f"  {'LLM calls':16}{plan.llm_calls:>9}")
    for role, n in plan.calls.items():
        echo(f"    {role:14}{n:>9}")
    known = "found so far" if plan.concepts_known else "at most, before reflection finds them"
    rule = plan.concepts_rule
    echo(f"  {'concepts':16}{plan.concepts:>9}  ({known}{': ' + rule if rule else ''})")
