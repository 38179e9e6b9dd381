"""The offline backend: every BREW role by deterministic rules, no model.

It is what the offline demo and CI run, and a baseline to compare LLM roles
against. It works on any OpenAI-format tool-calling trajectory. The rules:

Reflector
  A tool whose name starts with a read verb (``get``, ``find``, ``list``,
  ``search``, ...) is a lookup; a tool that hands the conversation to a person
  (``transfer_to_human_agents``, ``escalate``) is a hand-off; any other tool
  changes state. The concepts of a trajectory are its first one or two
  distinct state-changing tools (for a failing run, also the ones it tried
  and failed), named from the tool (``cancel_reservation`` → "cancel
  reservation"). A run that changed nothing — refused, or handed off — is
  named for the *request*: the first action verb in the user's turns
  (``cancel``, ``refund``, inflections folded) and the object of the agent's
  last lookup (``get_reservation_details`` → "cancel reservation"), else the
  verb alone; without an action verb, the last lookup (what the answer
  rested on), else the request's most frequent content words (never names,
  placeholders or ids); hand-offs never name a concept. A
  passing run gives a *prescriptive* insight whose steps are its successful
  lookups and that one state change — never another state change of the
  same run (and the first message tool, such as ``reply``, used right after),
  written with argument names (``cancel_order(order_id, reason)``). Every tool
  error gives a *diagnostic* pitfall quoting the error, with the call that
  worked next when there is one, filed under the concept of the failed call
  (a failed lookup under the next state change it served; a failed state
  change that is not one of the run's concepts is left out). A failing run
  whose calls all succeeded gives a diagnostic note that the state change was
  made with the wrong details. An insight's ``task`` is the user's turn that
  asks for the concept's action (synonyms folded), else the first turn (the
  request as the user put it), so recipe examples quote requests, not task
  scripts. Trajectories arrive scrubbed (``trajectories/scrub.py``).

Integrator
  Assembles a recipe from the insights and the current document. A seeded
  sample picks which insights to use (each with probability 0.7) and in what
  order; the steps merge the step sequences of the picked prescriptive
  insights (alternatives that different passing runs used, such as two ways
  to identify a customer, stay next to each other), else the current
  document's steps are kept. Pitfalls come from the concept's own pitfall and
  note insights, each once (an error quoted twice, once with what the run did
  next, is kept as the longer). The example is a request that names the
  concept's action (and its object, when one does), or none; a concept not led
  by an action verb takes any of its requests. Different samples therefore
  differ in quality, as LLM samples do.

Relabeller
  Writes a task that describes what the agent actually did: its successful
  state-changing calls with their arguments.

Judge
  Scores the rubrics it knows by id: ``no-tool-errors`` (share of calls that
  did not fail), ``no-repeated-calls`` (share of calls that are not an exact
  repeat), ``concise`` (1 at most 10 assistant turns, falling to 0 at 40).
  Other rubrics get no score and a note saying so.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from brewkb.errors import LLMError
from brewkb.llm.embed import hashed_ngram_embeddings
from brewkb.llm.roles import (
    DIAGNOSTIC,
    Insight,
    RelabelledTask,
    Rubric,
    RubricScores,
    polarity_of,
)
from brewkb.recipes import Recipe, build_body, slugify
from brewkb.trajectories.schema import Outcome, ToolCall, Trajectory, content_id, tool_calls

__all__ = ["OfflineBackend", "READ_VERBS", "concept_of_tool", "step_text", "parse_step", "is_lookup", "is_talk",
           "is_handoff", "action_verb", "user_turns", "ACTION_VERBS", "verb_of", "names_action", "asks_for"]

READ_VERBS = frozenset({
    "get", "find", "list", "search", "lookup", "look", "read", "fetch", "check", "calculate", "compute",
    "think", "query", "show", "view", "describe", "retrieve", "count", "browse", "open", "inspect", "load",
})
TALK_VERBS = frozenset({"respond", "reply", "say", "send_message", "message", "ask", "answer", "final"})
STOPWORDS = frozenset("""a an and are as at be but by can do for from has have i if in into is it its me my
no not of on or our please so that the their them then there these they this to too want was we were what
when which while who will with would you your yours also just like need any all some one two
hello hi hey thanks thank dear regards sorry could should would might must shall may can cannot
where how why what know help really because having been same make get got going able""".split())
STEP_RE = re.compile(r"^\s*(?:\d+[.)]|[-*])\s*`([A-Za-z_][\w.]*)\(([^)`]*)\)`")
MAX_STEPS = 10


def _words(name: str) -> list[str]:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    return [w for w in re.split(r"[_\W]+", spaced.lower()) if w]


def is_lookup(name: str) -> bool:
    words = _words(name)
    return bool(words) and words[0] in READ_VERBS


def is_talk(name: str) -> bool:
    words = _words(name)
    return bool(words) and (words[0] in TALK_VERBS or "_".join(words) in TALK_VERBS)


HANDOFF_VERBS = frozenset({"transfer", "escalate", "handoff", "hand", "route", "forward"})
HANDOFF_TARGETS = frozenset({"human", "humans", "agent", "agents", "person", "operator", "support", "staff",
                             "representative", "supervisor", "manager"})


def is_handoff(name: str) -> bool:
    """A tool that hands the conversation to a person (``transfer_to_human_agents``,
    ``escalate``): it ends the agent's part, it is not what the user wanted done."""
    words = _words(name)
    return bool(words) and (words[0] in {"escalate", "handoff"} or
                            (words[0] in HANDOFF_VERBS and bool(HANDOFF_TARGETS & set(words[1:]))))


def concept_of_tool(name: str) -> str:
    """``cancel_reservation`` → ``cancel reservation``."""
    return " ".join(_words(name)) or name


def step_text(call: ToolCall) -> str:
    """A call written in the recipe step convention: ``name(arg1, arg2)``."""
    args = call.args() or {}
    return f"{call.name}({', '.join(args)})"


def parse_step(line: str) -> tuple[str, list[str]] | None:
    """The tool and argument names of a step line like ``1. `find_customer(email)` — why``."""
    match = STEP_RE.match(line)
    if not match:
        return None
    args = [a.strip() for a in match.group(2).split(",") if a.strip()]
    return match.group(1), args


_IDENTIFIERS = re.compile(r"\S+@\S+|https?://\S+|\S*\d\S*")


_PROPER = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+")
_PLACEHOLDERS = re.compile(r"<[a-z_]+>")


def _task_keywords(text: str, n: int = 2) -> list[str]:
    """The most frequent content words, leaving out emails, links, placeholders,
    any token with a digit (ids, amounts, dates) and capitalised words inside a
    sentence (names): entities are not what a task is about."""
    names = {w.lower() for w in _PROPER.findall(text)}
    plain = _IDENTIFIERS.sub(" ", _PLACEHOLDERS.sub(" ", text).lower())
    words = [w for w in re.findall(r"[a-z]{3,}", plain) if w not in STOPWORDS and w not in names]
    return [w for w, _ in Counter(words).most_common(n)]


def _distinct(lines: Sequence[str]) -> list[str]:
    """``lines`` in order without repeats: a line that another one holds (the
    same error, once with what the run did next) is kept once, as the longer."""
    kept: list[str] = []
    for line in lines:
        if any(line in k for k in kept):
            continue
        shorter = [n for n, k in enumerate(kept) if k in line]
        if shorter:
            kept[shorter[0]] = line
            kept = [k for n, k in enumerate(kept) if n not in shorter[1:]]
        else:
            kept.append(line)
    return kept


def _first_line(text: str | None, limit: int = 160) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


ACTION_VERBS = frozenset("""add apply book buy cancel change close create delete dispute downgrade edit exchange
extend modify move open pay purchase refund register remove renew replace reschedule reserve reset return
send set subscribe switch transfer unsubscribe update upgrade""".split())
"""Verbs of requests that change something ("order" is left out: in requests it is mostly a noun)."""
GENERIC_NOUNS = frozenset({"details", "detail", "info", "information", "status", "data", "list", "by", "id", "all"})


VERB_SYNONYMS = {"change": "update", "modify": "update", "edit": "update", "alter": "update", "amend": "update",
                 "move": "update", "reschedule": "update", "switch": "update", "swap": "update",
                 "reserve": "book", "purchase": "buy", "delete": "remove", "drop": "remove"}
"""Action verbs that name one intent."""


def verb_of(name: str) -> str:
    """The leading word of a concept name, synonyms folded (``change flight`` → ``update``)."""
    words = name.split()
    return VERB_SYNONYMS.get(words[0], words[0]) if words else ""


def names_action(text: str, concept: str) -> bool:
    """Whether ``text`` asks for the action that leads ``concept`` (synonyms folded)."""
    verb = verb_of(concept)
    return bool(verb) and any((v := action_verb(w)) is not None and verb_of(v) == verb
                              for w in re.findall(r"[a-z]+", text.lower()))


def names_object(text: str, concept: str) -> bool:
    """Whether ``text`` mentions what ``concept`` acts on: its last word, by
    its first three letters (``baggages`` ~ "bags", ``flights`` ~ "flight")."""
    words = concept.split()
    return len(words) > 1 and any(w[:3] == words[-1][:3] for w in re.findall(r"[a-z]+", text.lower()))


def asks_for(texts: Sequence[str], concept: str) -> list[str]:
    """The texts that ask for ``concept``'s action (all of them for a concept
    not led by an action verb, such as a lookup), those that also name its
    object first."""
    acts = action_verb(concept.split()[0]) is not None if concept.split() else False
    naming = [t for t in texts if names_action(t, concept)] if acts else list(texts)
    return sorted(naming, key=lambda t: not names_object(t, concept))


def user_turns(trajectory: Trajectory) -> list[str]:
    return [str(m["content"]) for m in trajectory.messages
            if m.get("role") == "user" and isinstance(m.get("content"), str) and m["content"].strip()]


def action_verb(word: str) -> str | None:
    """The base form of an action verb (``cancelled`` → ``cancel``), else ``None``."""
    for cut in (0, 1, 2, 3):
        stem = word[: len(word) - cut]
        if stem in ACTION_VERBS:
            return stem
    return None


def request_concept(text: str, calls: Sequence[ToolCall]) -> str | None:
    """A concept for a request nothing was changed for: its first action verb
    (``cancel``, ``refund``, ...) and the object of the agent's last lookup
    (``get_reservation_details`` → ``reservation``: what it examined before
    answering), else the verb alone; without an action verb, the last
    lookup's own name (what the answer rested on), else the request's most
    frequent content words (names and placeholders left out)."""
    words = re.findall(r"[a-z]+", _IDENTIFIERS.sub(" ", text.lower()))
    verb = next((v for w in words if (v := action_verb(w))), None)
    lookups = [c for c in calls if is_lookup(c.name) and not c.error]
    if verb is None:
        return concept_of_tool(lookups[-1].name) if lookups else (" ".join(_task_keywords(text)) or None)
    for call in reversed(lookups):
        objects = [w for w in _words(call.name)[1:] if w not in GENERIC_NOUNS and w not in STOPWORDS]
        if objects:
            return f"{verb} {objects[0]}"
    return verb


def _owner(index: int, calls: Sequence[ToolCall], by_call: dict[int, str], first: str) -> str | None:
    """The concept a failed call belongs to: its own state change; for a
    failed lookup, the next state change it served; else the run's first
    concept. A failed state change that is not one of the concepts is
    another procedure's pitfall (``None``)."""
    if index in by_call:
        return by_call[index]
    call = calls[index]
    if not (is_lookup(call.name) or is_talk(call.name) or is_handoff(call.name)):
        return None
    later = next((by_call[n] for n in sorted(by_call) if n > index), None)
    return later or first


def merge_steps(sequences: Sequence[Sequence[str]]) -> list[str]:
    """One procedure from several that worked: every step of every sequence,
    each placed after the step that preceded it where it was seen first
    (``[a, c] + [b, c]`` → ``[a, b, c]``: alternatives stay next to each other)."""
    merged: list[str] = []
    for sequence in sequences:
        at = -1
        for step in sequence:
            if step in merged:
                at = merged.index(step)
            else:
                merged.insert(at + 1, step)
                at += 1
    return merged[:MAX_STEPS]


_A_RUN = {True: "A passing run", None: "A run whose outcome is unknown"}


class OfflineBackend:
    """Deterministic rules for every role (see the module docstring)."""

    name = "offline"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    # ------------------------------------------------------------- reflector
    def concepts_of(self, trajectory: Trajectory, max_concepts: int = 2) -> list[tuple[str, int | None]]:
        """Concept names and the index of the call that defines each: the
        state-changes the run made (and, for a failing run, the ones it
        tried); a hand-off to a person is not one. Without a state change,
        the request the user made (refused or handed off), named by its
        action verb and the object the agent looked up."""
        calls = tool_calls(trajectory.messages)
        found: list[tuple[str, int | None]] = []
        for i, call in enumerate(calls):
            if (is_lookup(call.name) or is_talk(call.name) or is_handoff(call.name)
                    or (call.error and trajectory.success)):
                continue
            concept = concept_of_tool(call.name)
            if concept not in (c for c, _ in found):
                found.append((concept, i))
        if not found:
            request = request_concept(" ".join(user_turns(trajectory)) or trajectory.task, calls)
            if request:
                found.append((request, None))
        return found[:max_concepts]

    async def reflect(self, trajectory: Trajectory, max_concepts: int = 2) -> list[Insight]:
        calls = tool_calls(trajectory.messages)
        concepts = self.concepts_of(trajectory, max_concepts)
        turns = user_turns(trajectory) or [trajectory.task]
        insights: list[Insight] = []

        def add(concept: str, text: str, polarity: str, kind: str, steps: tuple[str, ...] = ()) -> None:
            # the request as the user put it: the turn that asks for this concept's action, else the first
            request = next(iter(asks_for(turns, concept)), turns[0])
            insights.append(Insight(concept, text, polarity, trajectory.id, trajectory.task_id,
                                    _first_line(request, 400), steps, kind))

        changes = {i for i, c in enumerate(calls) if not (is_lookup(c.name) or is_talk(c.name))}
        for concept, index in concepts:
            if index is None:
                self._request_insight(trajectory, calls, concept, add)
                continue
            if calls[index].error:
                continue  # an attempt that failed teaches through its pitfall below
            # only this concept's own steps: what was looked up, then this change
            upto = [c for n, c in enumerate(calls[: index + 1])
                    if not c.error and not is_talk(c.name) and (n == index or n not in changes)]
            after = []  # what the agent then told the user, up to the next change
            for c in calls[index + 1 :]:
                if not (is_talk(c.name) or is_lookup(c.name)):
                    break
                if is_talk(c.name) and not c.error:
                    after.append(c)
            steps = tuple(dict.fromkeys(step_text(c) for c in upto + after[:1]))[-MAX_STEPS:]
            if trajectory.success is not False:  # an unlabelled run's procedure, said as such
                add(concept, f"{_A_RUN[trajectory.success]} did: " + "; then ".join(f"`{s}`" for s in steps),
                    polarity_of(trajectory.success), "steps", steps)
            elif not any(c.error for c in calls):
                add(concept, f"A run that called `{step_text(calls[index])}` without errors still failed: check that "
                             "every detail the task asks for (items, amounts, reasons, payment) is used, "
                             "and nothing else", DIAGNOSTIC, "pitfall")
        by_call = {i: c for c, i in concepts if i is not None}
        for i, call in enumerate(calls):
            if not call.error or not concepts:
                continue
            owner = _owner(i, calls, by_call, concepts[0][0])
            if owner is None:
                continue  # an error of another procedure than this run's concepts
            text = f"`{step_text(call)}` failed with: \"{_first_line(call.result)}\""
            later = next((c for c in calls[i + 1 :] if not c.error and not is_talk(c.name)), None)
            if later is not None and later.name != call.name:
                text += f"; the run went on with `{step_text(later)}`"
            add(owner, text, DIAGNOSTIC, "pitfall")
        return insights

    @staticmethod
    def _request_insight(trajectory: Trajectory, calls: Sequence[ToolCall], concept: str, add: Any) -> None:
        """What a run that changed nothing teaches about the request it was given:
        its lookups, its hand-off if any, and what it then told the user."""
        handoff = next((c for c in calls if is_handoff(c.name) and not c.error), None)
        looked = tuple(dict.fromkeys(step_text(c) for c in calls if is_lookup(c.name) and not c.error))[:MAX_STEPS]
        last = max((n for n, c in enumerate(calls) if not c.error and not is_talk(c.name)), default=-1)
        told = next((step_text(c) for c in calls[last + 1 :] if is_talk(c.name) and not c.error), None)
        outcome = {True: "passed", False: "failed", None: "has no known outcome"}[trajectory.success]
        steps = (*looked, *([step_text(handoff)] if handoff else []), *([told] if told else []))
        if trajectory.success is False:
            add(concept, (f"A run that handed the request to a person with `{step_text(handoff)}` failed"
                          if handoff else "A run that changed nothing failed: the request needed an action, "
                                          "or a clear refusal that the policy supports"), DIAGNOSTIC, "pitfall")
        elif handoff is not None:
            add(concept, f"A run that {outcome} handed the request to a person with `{step_text(handoff)}` "
                         "instead of changing anything" + (f", after checking `{looked[-1]}`" if looked else ""),
                polarity_of(trajectory.success), "steps", steps)
        else:
            add(concept, f"{_A_RUN[trajectory.success]} changed nothing: it checked "
                         + (", ".join(f"`{s}`" for s in looked) or "the request") + " and answered"
                         + (f" with `{told}`" if told else ""), polarity_of(trajectory.success),
                "steps" if steps else "note", steps)

    # ------------------------------------------------------------ integrator
    async def integrate(self, concept: str, aliases: Sequence[str], insights: Sequence[Insight],
                        current: Recipe | None, sample: int) -> Recipe:
        rng = random.Random(content_id([self.seed, concept, sample, [i.to_json() for i in insights]]))
        picked = [i for i in insights if rng.random() < 0.7] or list(insights[:1])
        rng.shuffle(picked)
        sequences = [i.steps for i in picked if i.kind == "steps" and i.steps]
        tool = concept.replace(" ", "_") + "("
        own = [q for q in sequences if any(step.startswith(tool) for step in q)]
        # a concept named for a tool keeps only procedures that use it; the
        # others (a request of this kind handed off or refused) become notes
        others = [q for q in sequences if own and q not in own]
        steps = merge_steps(own or sequences)
        if steps:
            how = "\n".join(f"{n}. `{s}`" for n, s in enumerate(steps, 1))
        else:
            how = current.section("How to perform") if current else ""
        old_pitfalls = [p for p in (current.section("Pitfalls") if current else "").splitlines() if p.strip()]
        new_pitfalls = [f"- {i.insight}" for i in picked if i.kind in ("pitfall", "note")]
        new_pitfalls += list(dict.fromkeys(f"- Some such requests were not done by `{concept.replace(' ', '_')}`: a "
                                           "passing run did " + "; then ".join(f"`{x}`" for x in q) for q in others))
        pitfalls = _distinct(new_pitfalls + old_pitfalls)[:6]
        tasks = [i.task for i in insights if i.task]
        # other action verbs in its requests belong to other intents (a rebooking mentions "cancel")
        lead = set(concept.split()[:1])
        keywords = [w for w in _task_keywords(" ".join(tasks), 12) if w in lead or action_verb(w) is None][:6]
        description = f"Use when the task is to {concept}"
        if keywords:
            description += f" (tasks mentioning {', '.join(keywords)})"
        # the example is a request that names this action, from a passing run when
        # there is one; no example rather than another intent's request
        naming = asks_for(list(dict.fromkeys(i.task for i in insights if i.task)), concept)
        naming = [t for t in naming if names_object(t, concept) == names_object(naming[0], concept)] if naming else []
        worked = [t for t in naming if any(i.task == t and i.kind == "steps" for i in insights)]
        example = rng.choice(worked or naming) if naming else ""
        body = build_body([
            ("When to use", f"The request is to {concept}." + (f" For example: {_first_line(example, 300)}"
                                                                if example else "")),
            ("How to perform", how or "No procedure is known yet; record what works."),
            ("Pitfalls", "\n".join(pitfalls)),
        ])
        sources = list(dict.fromkeys([*(current.sources if current else ()), *(i.source for i in picked)]))
        name = current.name if current else slugify(concept)
        base = current or Recipe(name=name, description="")
        return base.replace(
            name=name, description=description[:1024], concept=concept,
            aliases=tuple(a for a in aliases if a != concept), sources=tuple(sources[-50:]), body=body,
        )

    # ------------------------------------------------------------ relabeller
    async def relabel(self, trajectory: Trajectory) -> RelabelledTask | None:
        done = [c for c in tool_calls(trajectory.messages)
                if not c.error and not is_lookup(c.name) and not is_talk(c.name)]
        if not done:
            return None
        actions = tuple((c.name, c.args() or {}) for c in done)
        parts = [f"{concept_of_tool(n)} with " + ", ".join(f"{k}={v!r}" for k, v in a.items()) for n, a in actions]
        summary = f"The agent made {len(done)} change(s): " + "; ".join(parts)
        return RelabelledTask(task="Please " + "; then ".join(parts) + ".", summary=summary, actions=actions)

    # ----------------------------------------------------------------- judge
    async def judge(self, trajectory: Trajectory, rubrics: Sequence[Rubric]) -> RubricScores:
        calls = tool_calls(trajectory.messages)
        scores: dict[str, float | None] = {}
        notes: dict[str, str] = {}
        for rubric in rubrics:
            if rubric.id == "no-tool-errors":
                errors = sum(c.error for c in calls)
                scores[rubric.id] = 1.0 - errors / len(calls) if calls else 1.0
                notes[rubric.id] = f"{errors} of {len(calls)} tool calls failed"
            elif rubric.id == "no-repeated-calls":
                seen = Counter((c.name, c.arguments) for c in calls)
                repeats = sum(n - 1 for n in seen.values())
                scores[rubric.id] = 1.0 - repeats / len(calls) if calls else 1.0
                notes[rubric.id] = f"{repeats} exact repeats"
            elif rubric.id == "concise":
                scores[rubric.id] = float(np.clip((40 - trajectory.steps) / 30, 0.0, 1.0))
                notes[rubric.id] = f"{trajectory.steps} assistant turns"
            else:
                scores[rubric.id] = None
                notes[rubric.id] = "the offline judge cannot score this rubric"
        return RubricScores(scores, notes)

    async def judge_outcome(self, trajectory: Trajectory) -> Outcome:
        # rules cannot tell from a transcript whether a request was done right
        raise LLMError("the offline backend cannot judge whether a conversation succeeded")

    # -------------------------------------------------------------- embedder
    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return hashed_ngram_embeddings(texts)
