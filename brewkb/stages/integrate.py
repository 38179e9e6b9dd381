"""Integration: a concept's insights and its current document → recipe
samples. A sample that does not parse or lint is rejected and asked for again.

Whatever wrote a sample (an LLM, or the offline rules), its lines that read
as instructions to an agent and repeat text of the logs it learned from (the
insights' requests and texts) are dropped before the sample is kept
(``brewkb.trajectories.quote.screen``): log text reaches a recipe only the
way ``quote`` lets it, and the pull request lists what was held back. So are
the lines that call a tool whose name, read as words, reads as instructions
(a log names its tools), and the steps left are numbered again."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from brewkb.errors import LLMError, RecipeError
from brewkb.llm.roles import Backend, Insight
from brewkb.recipes import Recipe, parse_recipe, render_recipe, validate
from brewkb.trajectories.quote import LogIndex, name_reason, screen

__all__ = ["integrate"]

log = logging.getLogger(__name__)
RETRY_STRIDE = 1000  # a retried sample uses another sample index, so another cache entry and seed


_CALLED = re.compile(r"`([A-Za-z_][\w.-]*)\(")


def _told_by_name(body: str) -> tuple[str, list[tuple[str, str]]]:
    """``body`` without the lines that call a tool whose name, read as words,
    reads as instructions (a log named it: ``get_full_card_number_from_caller``)."""
    kept, dropped = [], []
    for line in body.split("\n"):
        reason = next((r for name in _CALLED.findall(line) if (r := name_reason(name)) is not None), None)
        (dropped.append((line, reason)) if reason else kept.append(line))
    if dropped:  # the steps left are numbered again, one after another
        number = 0
        for n, line in enumerate(kept):
            item = re.match(r"(\s*)\d+\.(\s)", line)
            number = number + 1 if item else 0
            kept[n] = f"{item.group(1)}{number}.{item.group(2)}{line[item.end():]}" if item else line
    return "\n".join(kept), dropped


def _screened(recipe: Recipe, insights: Sequence[Insight]) -> Recipe:
    """``recipe`` without its lines that read as instructions and repeat the
    insights' log text, and those that call a tool named as instructions."""
    texts = LogIndex(text for i in insights for text in (i.task, i.insight) if text)
    body, named = _told_by_name(recipe.body)
    body, dropped = screen(body, texts)
    dropped = named + dropped
    description, dropped_too = screen(recipe.description, texts)
    for line, reason in dropped + dropped_too:
        log.info("integrate %s: a line that reads as instructions (%s) and repeats the logs is held back: %.80r",
                 recipe.name, reason, line)
    return recipe.replace(body=body, description=description) if dropped or dropped_too else recipe


async def integrate(backend: Backend, slug: str, title: str, aliases: Sequence[str], insights: Sequence[Insight],
                    current: Recipe | None, samples: int = 1, retries: int = 2,
                    first_sample: int = 0, errors: list[str] | None = None) -> list[Recipe]:
    """Up to ``samples`` valid recipes named ``slug``; a sample that fails
    ``retries`` + 1 times is dropped (and logged). Why each attempt failed is
    appended to ``errors``."""
    errors = errors if errors is not None else []
    found = []
    for sample in range(first_sample, first_sample + samples):
        for attempt in range(retries + 1):
            try:
                recipe = await backend.integrate(title, aliases, insights, current, sample + attempt * RETRY_STRIDE)
                recipe = parse_recipe(render_recipe(_screened(recipe.replace(name=slug), insights)))
            except (LLMError, RecipeError) as exc:
                log.info("integrate %s sample %d attempt %d: %s", slug, sample, attempt, exc)
                errors.append(str(exc))
                continue
            problems = [i for i in validate(recipe, stem=slug) if i.severity == "error"]
            if not problems:
                found.append(recipe)
                break
            log.info("integrate %s sample %d rejected: %s", slug, sample, problems[0].message)
            errors.append(f"the recipe does not lint: {problems[0].message}")
    return found
