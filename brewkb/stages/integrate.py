"""Integration: a concept's insights and its current document → recipe
samples. A sample that does not parse or lint is rejected and asked for again.

Whatever wrote a sample (an LLM, or the offline rules), its lines that read
as instructions to an agent and repeat text of the logs it learned from (the
insights' requests and texts) are dropped before the sample is kept
(``brewkb.trajectories.quote.screen``): log text reaches a recipe only the
way ``quote`` lets it, and the pull request lists what was held back. So are
the lines that call a tool whose name or an argument name, read as words,
reads as instructions (a log names them), or, when a team lists its agent's tools
(``tools.known``), a tool it did not list; the steps left are numbered again."""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Sequence

from brewkb.errors import LLMError, RecipeError
from brewkb.llm.roles import Backend, Insight
from brewkb.recipes import Recipe, parse_recipe, render_recipe, validate
from brewkb.trajectories.quote import LogIndex, name_reason, screen
from brewkb.trajectories.tools import CALL_RE, CALLED, NOT_THE_AGENTS, not_the_agents

__all__ = ["integrate"]

log = logging.getLogger(__name__)
RETRY_STRIDE = 1000  # a retried sample uses another sample index, so another cache entry and seed


def _reason(line: str, known: Collection[str]) -> str | None:
    """Why a line may not call what it calls: a tool or argument name that reads as instructions, or a tool
    that is not among the agent's ``known`` ones; ``None`` when it may."""
    for name in CALLED.findall(line):
        if (reason := name_reason(name) or (NOT_THE_AGENTS if not_the_agents(name, known) else None)) is not None:
            return reason
    return next((r for _, args in CALL_RE.findall(line) for arg in args.split(",")
                 if (r := name_reason(arg.strip())) is not None), None)


def _told_by_name(body: str, known: Collection[str]) -> tuple[str, list[tuple[str, str]]]:
    """``body`` without the lines that call a tool whose name or an argument
    name, read as words, reads as instructions (a log named it:
    ``get_full_card_number_from_caller``), or a tool that is not among the
    agent's ``known`` tools."""
    kept, dropped = [], []
    for line in body.split("\n"):
        reason = _reason(line, known)
        (dropped.append((line, reason)) if reason else kept.append(line))
    if dropped:  # the steps left are numbered again, one after another
        number = 0
        for n, line in enumerate(kept):
            item = re.match(r"(\s*)\d+\.(\s)", line)
            number = number + 1 if item else 0
            kept[n] = f"{item.group(1)}{number}.{item.group(2)}{line[item.end():]}" if item else line
    return "\n".join(kept), dropped


def _screened(recipe: Recipe, insights: Sequence[Insight], known: Collection[str]) -> Recipe:
    """``recipe`` without its lines that read as instructions and repeat the
    insights' log text, and those that call a tool named as instructions or
    not among the ``known`` ones."""
    texts = LogIndex(text for i in insights for text in (i.task, i.insight) if text)
    body, named = _told_by_name(recipe.body, known)
    body, dropped = screen(body, texts)
    dropped = named + dropped
    description, dropped_too = screen(recipe.description, texts)
    for line, reason in dropped + dropped_too:
        log.info("integrate %s: a line that calls a tool so named or reads as instructions and repeats the logs "
                 "(%s) is held back: %.80r",
                 recipe.name, reason, line)
    return recipe.replace(body=body, description=description) if dropped or dropped_too else recipe


async def integrate(backend: Backend, slug: str, title: str, aliases: Sequence[str], insights: Sequence[Insight],
                    current: Recipe | None, samples: int = 1, retries: int = 2,
                    first_sample: int = 0, errors: list[str] | None = None,
                    known: Collection[str] = ()) -> list[Recipe]:
    """Up to ``samples`` valid recipes named ``slug``; a sample that fails
    ``retries`` + 1 times is dropped (and logged). Why each attempt failed is
    appended to ``errors``. ``known``: the agent's tools (``tools.known``)."""
    errors = errors if errors is not None else []
    found = []
    for sample in range(first_sample, first_sample + samples):
        for attempt in range(retries + 1):
            try:
                recipe = await backend.integrate(title, aliases, insights, current, sample + attempt * RETRY_STRIDE)
                recipe = parse_recipe(render_recipe(_screened(recipe.replace(name=slug), insights, known)))
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
