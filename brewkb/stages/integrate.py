"""Integration: a concept's insights and its current document → recipe
samples. A sample that does not parse or lint is rejected and asked for again.

Whatever wrote a sample (an LLM, or the offline rules), its lines that read
as instructions to an agent and repeat text of the logs it learned from (the
insights' requests and texts, and what their conversations' users and tools
said) are dropped before the sample is kept
(``brewkb.trajectories.quote.screen``), and so are its lines that copy eight
words in a row of what users and tools said outside double quotes
(``quote.Copies``): log text reaches a recipe only the way ``quote`` lets
it, and the pull request lists what was held back. The
calls its lines make are screened too (``calls``): a tool or an argument
whose name reads as instructions, a tool the agent does not have, a tool or
an argument too few tasks called or passed."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import lru_cache

from brewkb.config import Signatures
from brewkb.errors import LLMError, RecipeError
from brewkb.llm.roles import Backend, Insight
from brewkb.recipes import Recipe, parse_recipe, render_recipe, validate, visible
from brewkb.stages.calls import CallRules, screen_calls
from brewkb.trajectories.quote import Copies, LogIndex, screen

__all__ = ["integrate"]

log = logging.getLogger(__name__)
RETRY_STRIDE = 1000  # a retried sample uses another sample index, so another cache entry and seed


def _screened(recipe: Recipe, texts: LogIndex, copies: Copies, rules: CallRules) -> Recipe:
    """``recipe`` without its lines that read as instructions and repeat log
    text (``texts``), or copy what users and tools said outside quotation marks
    (``copies``), and with its calls as ``rules`` let them be."""
    body, named = screen_calls(recipe.body, rules)
    body, dropped = screen(body, texts)
    body, copied = copies.screen(body)
    description, dropped_too = screen(recipe.description, texts)
    description, copied_too = copies.screen(description)
    changes = named + dropped + copied + dropped_too + copied_too
    for line, reason in changes:
        log.info("integrate %s: a line changed or held back (%s): %.80r", recipe.name, reason, line)
    if visible(body) != body or visible(description) != description:  # no hidden text reaches the PR either
        changes.append(("", "invisible characters"))
        body, description = visible(body), visible(description)
    return recipe.replace(body=body, description=description) if changes else recipe


@lru_cache(maxsize=32)
def _screens(tasks: tuple[str, ...], notes: tuple[str, ...], said: tuple[str, ...]) -> tuple[LogIndex, Copies]:
    """The screens of a concept's logs, built once for all the samples and iterations that integrate it."""
    return LogIndex([*tasks, *notes, *said]), Copies([*tasks, *said])


async def integrate(backend: Backend, slug: str, title: str, aliases: Sequence[str], insights: Sequence[Insight],
                    current: Recipe | None, samples: int = 1, retries: int = 2,
                    first_sample: int = 0, errors: list[str] | None = None,
                    known: Signatures | None = None,
                    supported: Mapping[str, frozenset[str]] | None = None,
                    logs: Mapping[str, Sequence[str]] | None = None) -> list[Recipe]:
    """Up to ``samples`` valid recipes named ``slug``; a sample that fails
    ``retries`` + 1 times is dropped (and logged). Why each attempt failed is
    appended to ``errors``. ``known``: the agent's tools (``tools.known``);
    ``supported``: the calls a line may make (``calls.supported_calls``; ``None``: any);
    ``logs``: the texts of the conversations the insights came from, by trajectory id, for the screen."""
    rules = CallRules.of(current.body if current else "", known or {}, supported)
    # the logs a written line is compared with: the insights, and what the conversations they came from said,
    # which the model that reflected on them read
    said = tuple(text for source in dict.fromkeys(i.source for i in insights) for text in (logs or {}).get(source, ()))
    texts, copies = _screens(tuple(i.task for i in insights if i.task), tuple(i.insight for i in insights if i.insight),
                             said)
    errors = errors if errors is not None else []
    found = []
    for sample in range(first_sample, first_sample + samples):
        for attempt in range(retries + 1):
            try:
                recipe = await backend.integrate(title, aliases, insights, current, sample + attempt * RETRY_STRIDE)
                recipe = parse_recipe(render_recipe(_screened(recipe.replace(name=slug), texts, copies, rules)))
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
