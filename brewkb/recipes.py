"""Recipes: one markdown file per concept, YAML front matter plus sections.

A recipe parsed from text remembers that text, and rendering an unchanged
recipe returns it byte for byte: tools never reformat a file they did not
change. Dates and other YAML scalars that look like timestamps stay the
strings they were written as.
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import frontmatter
import yaml

from brewkb.errors import RecipeError

__all__ = [
    "LEARNED_FROM", "served", "visible", "HIDDEN", "EXAMPLES", "FOR_EXAMPLE", "FOR_REQUEST", "Anchor", "ANCHOR_SECTIONS", "anchors",
    "anchor_line",
    "KNOWN_KEYS",
    "SECTIONS",
    "Recipe",
    "Issue",
    "parse_recipe",
    "read_recipe",
    "render_recipe",
    "slugify",
    "is_slug",
    "validate",
    "split_sections",
    "build_body",
]

KNOWN_KEYS = ("name", "description", "concept", "aliases", "tags", "sources")
REQUIRED_KEYS = ("name", "description")
SECTIONS = ("When to use", "How to perform", "Pitfalls", "Example")
MAX_NAME = 64
MAX_DESCRIPTION = 1024
BOM = "\ufeff"
SOURCES_SHOWN = 5
"""Source ids a rendered recipe's front matter keeps; search node commits hold them all."""

_SLUG_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_CLOSING_RE = re.compile(r"^-{3,}[ \t]*\r?$", re.MULTILINE)
_TIMESTAMP = "tag:yaml.org,2002:timestamp"


def _without_timestamps(resolvers: dict[Any, list[Any]]) -> dict[Any, list[Any]]:
    return {k: [(tag, rx) for tag, rx in v if tag != _TIMESTAMP] for k, v in resolvers.items()}


# libyaml's parser when PyYAML has it (it usually does): the same results, much faster
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SafeDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Loader(_SafeLoader):  # type: ignore[valid-type,misc]
    """SafeLoader that keeps dates as the strings they were written as."""


class _Dumper(_SafeDumper):  # type: ignore[valid-type,misc]
    """SafeDumper that does not quote date-like strings (they load back as strings)."""


_Loader.yaml_implicit_resolvers = _without_timestamps(yaml.SafeLoader.yaml_implicit_resolvers)
_Dumper.yaml_implicit_resolvers = _without_timestamps(yaml.SafeDumper.yaml_implicit_resolvers)


def _refuse_aliases(fm: str) -> None:
    """Refuse YAML anchors and aliases before anything builds the front matter:
    an alias copies a node by reference, so eleven lines can stand for billions
    of values that every later reader (``repr``, rendering, the index) walks.
    Recipes never need them."""
    if "&" not in fm and "*" not in fm:  # neither can be written without its sign
        return
    for event in yaml.parse(fm, Loader=_Loader):
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            what = "an alias" if isinstance(event, yaml.AliasEvent) else "an anchor"
            mark = event.start_mark
            raise RecipeError(
                f"front matter uses {what} (`{'*' if what == 'an alias' else '&'}{anchor[:40]}`), which recipes "
                "do not allow; write the value out in full", mark.line + 2 if mark is not None else 2)


class _Handler(frontmatter.YAMLHandler):
    def load(self, fm: str, **kwargs: object) -> Any:
        _refuse_aliases(fm)
        return yaml.load(fm, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass

    def export(self, metadata: dict[str, object], **kwargs: object) -> str:
        return yaml.dump(
            metadata, Dumper=_Dumper, sort_keys=False, allow_unicode=True,
            default_flow_style=False, width=100,
        ).rstrip("\n")


_HANDLER = _Handler()


@dataclass(frozen=True)
class Issue:
    """One problem with a recipe. ``key`` names the front matter key it concerns
    (``None`` for the body or the file as a whole)."""

    severity: str  # "error" | "warning"
    message: str
    hint: str
    key: str | None = None


@dataclass(frozen=True)
class Recipe:
    """A recipe document.

    Attributes:
      name: slug, equal to the file stem.
      description: when to use it; the most important retrieval field.
      concept: human title of the meta-concept.
      aliases: other phrasings of the concept.
      tags: free labels.
      sources: ids of the trajectories whose insights the recipe holds.
      body: the markdown after the front matter.
      extra: front matter keys brewkb does not know, in file order.
      key_order: the order of the keys in the parsed file (kept on render; not
        part of equality).
      source: the text this value was parsed from; not part of equality.
    """

    name: str
    description: str
    concept: str = ""
    aliases: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    body: str = ""
    extra: tuple[tuple[str, Any], ...] = ()
    key_order: tuple[str, ...] = field(default=(), compare=False)
    source: str | None = field(default=None, compare=False, repr=False)
    origin: str | None = field(default=None, compare=False, repr=False)
    """Fingerprint of the values parsed from ``source`` (see ``render_recipe``)."""

    def fingerprint(self) -> str:
        return repr((self.name, self.description, self.concept, self.aliases, self.tags, self.sources,
                     self.body, self.extra))

    @property
    def title(self) -> str:
        return self.concept or self.name

    def section(self, title: str) -> str:
        """The text of section ``## title`` (case-insensitive), or ``""``."""
        wanted = title.strip().lower()
        for heading, text in split_sections(self.body):
            if heading.lower() == wanted:
                return text
        return ""

    def replace(self, **changes: Any) -> Recipe:
        return dataclasses.replace(self, **changes)

    def front_matter(self) -> dict[str, Any]:
        """Front matter as an ordered dict: the file's key order first, then
        brewkb's keys, then unknown keys."""
        values: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "concept": self.concept,
            "aliases": list(self.aliases),
            "tags": list(self.tags),
            "sources": list(self.sources),
        }
        values.update(dict(self.extra))
        order = [k for k in self.key_order if k in values]
        order += [k for k in values if k not in order and (k in REQUIRED_KEYS or values[k])]
        return {k: values[k] for k in order}


def is_slug(name: str) -> bool:
    return len(name) <= MAX_NAME and bool(_SLUG_RE.match(name))


def slugify(title: str) -> str:
    """A safe recipe name for any title: ``'../../etc/passwd'`` → ``'etc-passwd'``,
    ``'Export as PDF!'`` → ``'export-as-pdf'``."""
    ascii_text = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")
    if len(slug) > MAX_NAME:
        cut = slug[:MAX_NAME]
        slug = cut.rsplit("-", 1)[0] if "-" in cut else cut
    return slug or "recipe"


def _split(text: str) -> tuple[str, str]:
    if text.startswith(BOM):
        raise RecipeError(
            "file starts with a UTF-8 byte-order mark; remove it (`brewkb lint --fix` does)", 1
        )
    if not re.match(r"---[ \t]*\r?\n", text):
        raise RecipeError(
            "no front matter: start the file with a `---` line, the YAML keys and a closing `---`",
            1,
        )
    first_end = text.index("\n") + 1
    closing = _CLOSING_RE.search(text, first_end)
    if closing is None:
        raise RecipeError("front matter is not closed: add a `---` line after the YAML keys", 1)
    end = text.find("\n", closing.start())
    body = "" if end == -1 else text[end + 1 :]
    return text[first_end : closing.start()], body


def _string_list(meta: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = meta.get(key)
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list):
        return tuple(str(v) for v in value)
    raise RecipeError(f"`{key}` must be a list of strings, got {type(value).__name__}; "
                      f"write it as `{key}: [a, b]`")


def parse_recipe(text: str) -> Recipe:
    """Parse a recipe file's text. Raises ``RecipeError`` with a fixable message."""
    fm, body = _split(text)
    try:
        meta = _HANDLER.load(fm)
    except yaml.YAMLError as exc:
        # "while scanning a quoted scalar" marks where the unclosed construct starts, which is the line to fix;
        # the problem's own mark is where the parser gave up (often the closing `---`)
        mark = getattr(exc, "context_mark", None) or getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        if context and getattr(exc, "context_mark", None) is not None:
            problem = f"{problem} {context}"
        line = mark.line + 2 if mark is not None else 2
        raise RecipeError(
            f"front matter is not valid YAML: {problem}; fix the YAML syntax", line
        ) from None
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise RecipeError("front matter must be a YAML mapping of keys to values", 2)
    meta = {str(k): v for k, v in meta.items()}
    recipe = Recipe(
        name=str(meta.get("name") or ""),
        description=str(meta.get("description") or ""),
        concept=str(meta.get("concept") or ""),
        aliases=_string_list(meta, "aliases"),
        tags=_string_list(meta, "tags"),
        sources=_string_list(meta, "sources"),
        body=body,
        extra=tuple((k, v) for k, v in meta.items() if k not in KNOWN_KEYS),
        key_order=tuple(meta),
        source=text,
    )
    return recipe.replace(origin=recipe.fingerprint())


def read_recipe(path: Path) -> Recipe:
    """Read and parse a recipe file; errors name the file."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecipeError(f"{path}: not UTF-8 text ({exc.reason}); save it as UTF-8") from None
    except OSError as exc:
        raise RecipeError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        return parse_recipe(text)
    except RecipeError as exc:
        raise RecipeError(f"{path}: {exc}", exc.line) from None


def render_recipe(recipe: Recipe) -> str:
    """Render to text. A recipe equal to what it was parsed from renders as
    exactly that text."""
    if recipe.source is not None and recipe.origin == recipe.fingerprint():
        return recipe.source
    body = recipe.body
    if not body.endswith("\n"):
        body += "\n"
    return f"---\n{_HANDLER.export(recipe.front_matter())}\n---\n{body}"


def render_for_file(recipe: Recipe) -> str:
    """``render_recipe`` for a file brewkb writes into a KB: the front matter
    keeps the first ``SOURCES_SHOWN`` source ids and a comment with their
    count, so diffs stay readable (search node commits keep them all)."""
    if len(recipe.sources) <= SOURCES_SHOWN:
        return render_recipe(recipe)
    text = render_recipe(recipe.replace(sources=recipe.sources[:SOURCES_SHOWN]))
    comment = (f"# sources: the first {SOURCES_SHOWN} of {len(recipe.sources)} trajectories; the search node's "
               "commit (Brew-Sources) and note list them all\n")
    closing = _CLOSING_RE.search(text, 4)
    assert closing is not None  # render_recipe always closes the front matter
    return text[:closing.start()] + comment + text[closing.start():]


LEARNED_FROM = "Requests it was learned from"
"""The section that quotes a recipe's requests: retrieval reads it, an agent's context leaves it out."""


ANCHOR_SECTIONS = ("When to use", LEARNED_FROM)
"""The sections whose quoted lines are a recipe's anchors."""
_ANCHOR = re.compile(r'^[ \t]*[-*][ \t]+"(?P<request>.+)"(?:[ \t]+→[ \t]+(?P<steps>`.+))?[ \t]*$')
_CALL = re.compile(r"`([A-Za-z_][\w.-]*\([^)`]*\))`")


@dataclass(frozen=True)
class Anchor:
    """A request a recipe served, in its users' words (a quoted line of ``When
    to use`` or ``Requests it was learned from``: ``- "..."``), and its
    *exemplar*: the calls a conversation that passed made for it, in order,
    when the line gives them after an arrow (``- "..." → `a(x)`, `b(y)```)."""

    request: str
    steps: tuple[str, ...] = ()


def anchors(recipe: Recipe) -> list[Anchor]:
    """The anchors of a recipe, in file order (hand-written recipes have them
    when they quote requests as such lines)."""
    found = []
    for title, text in split_sections(recipe.body):
        if title.lower() not in (t.lower() for t in ANCHOR_SECTIONS):
            continue
        for line in text.splitlines():
            match = _ANCHOR.match(line)
            if match and match.group("request").strip():
                steps = tuple(_CALL.findall(match.group("steps") or ""))
                found.append(Anchor(match.group("request").strip(), steps))
    return found


def anchor_line(anchor: Anchor) -> str:
    """An anchor as a line of a recipe (``anchors`` reads it back)."""
    request = " ".join(anchor.request.split())
    return f'- "{request}"' + (" → " + ", ".join(f"`{s}`" for s in anchor.steps) if anchor.steps else "")


def split_sections(body: str) -> list[tuple[str, str]]:
    """``## Heading`` sections of a body, in order, with their text stripped."""
    parts = re.split(r"(?m)^##[ \t]+(.+?)[ \t]*$", body)
    return [(parts[i].strip(), parts[i + 1].strip()) for i in range(1, len(parts) - 1, 2)]


EXAMPLES = " Requests such as: "
"""Where a description written from logs begins to quote requests."""
FOR_EXAMPLE = " For example (personal data replaced):"
"""What introduces the anchors a ``When to use`` section quotes."""
FOR_REQUEST = ' (for: "{}")'
"""A request quoted after a line that says it was rightly left undone."""
_FOR_REQUEST = re.compile(re.escape(FOR_REQUEST).replace(re.escape("{}"), r'.*'), re.M)
_QUOTATION = re.compile(r'["“].*["”]')
"""From the first quotation mark to the last of a line's part: a quotation with quotation marks inside it
(written by hand, or by an older brewkb) is elided whole."""
_CODE = re.compile(r"(`[^`\n]*`)")
ELIDED = '"…"'
"""What an agent is shown in place of a quotation of the logs."""


def _elided(text: str) -> str:
    """``text`` with the quotations of each part outside code spans replaced by ``ELIDED``."""
    return "".join(part if part.startswith("`") else _QUOTATION.sub(ELIDED, part) for part in _CODE.split(text))


def visible(text: str) -> str:
    """``text`` without invisible characters: format (zero-width, bidi controls, tag characters), control
    (newline and tab kept), private-use and surrogate ones, and the line and paragraph separators."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(c for c in text if c in "\n\t" or unicodedata.category(c) not in HIDDEN)


HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})
"""Unicode categories of characters a reader does not see: control, format, surrogate, private use, and the
line and paragraph separators (line breaks to some readers)."""


def served(recipe: Recipe) -> Recipe:
    """``recipe`` as an agent is given it: without the words of the logs it
    quotes. Its anchors (the requests it is found by), the description's
    examples, a request quoted after a note and its aliases (other names of
    its concept, for retrieval) are left out; any other
    quotation (an error text a tool returned) is shown as ``ELIDED``. Text in
    double quotes is how brewkb quotes a log, so a team writes its own
    guidance unquoted. Invisible characters and front matter keys brewkb does
    not know are left out too: ``brewkb lint`` reports both in a file, and an
    agent is given neither. The description is one line, so it cannot open a
    heading or a recipe of its own in the block an agent is given."""
    sections = []
    for title, text in split_sections(recipe.body):
        if title.lower() == LEARNED_FROM.lower():
            continue
        if title.lower() in (t.lower() for t in ANCHOR_SECTIONS):
            text = "\n".join(line for line in text.splitlines() if not _ANCHOR.match(line)).replace(FOR_EXAMPLE, "")
        sections.append((title, _elided(_FOR_REQUEST.sub("", text))))
    body = build_body(sections) if recipe.body.strip() else recipe.body
    description = " ".join(_elided(recipe.description.split(EXAMPLES, 1)[0]).split())  # one line: no heading of its own
    return recipe.replace(description=visible(description), body=visible(body), aliases=(), extra=())


def build_body(sections: Iterable[tuple[str, str]]) -> str:
    """A body from ``(heading, text)`` pairs, skipping empty sections."""
    chunks = [f"## {title}\n\n{text.strip()}\n" for title, text in sections if text.strip()]
    return "\n" + "\n".join(chunks)


def validate(recipe: Recipe, stem: str | None = None) -> list[Issue]:
    """Problems of a parsed recipe; ``stem`` is its file name without ``.md``."""
    issues: list[Issue] = []
    present = set(recipe.key_order) if recipe.source is not None else set(KNOWN_KEYS)
    for key in REQUIRED_KEYS:
        if key not in present or not getattr(recipe, key).strip():
            issues.append(Issue("error", f"missing required key `{key}`",
                                f"add `{key}:` to the front matter", key))
    if recipe.name and not is_slug(recipe.name):
        issues.append(Issue(
            "error", f"name {recipe.name!r} is not a valid slug",
            f"use lowercase letters, digits and single hyphens, at most {MAX_NAME} chars "
            f"(e.g. {slugify(recipe.name)!r})", "name"))
    if stem is not None and recipe.name and recipe.name != stem:
        slug = recipe.name if is_slug(recipe.name) else slugify(recipe.name)
        rename = f"rename the file to {slug}.md" + ("" if slug == recipe.name else f" and set `name: {slug}`,")
        keep = f"set `name: {stem}`" if is_slug(stem) else f"name the file and the recipe {slugify(stem)}"
        issues.append(Issue(
            "error", f"name {recipe.name!r} differs from the file name {stem!r}", f"{rename} or {keep}", "name"))
    if len(recipe.description) > MAX_DESCRIPTION:
        issues.append(Issue(
            "error", f"description is {len(recipe.description)} chars, over {MAX_DESCRIPTION}",
            "shorten it to say when to use the recipe; move details to the body", "description"))
    for key, _ in recipe.extra:
        issues.append(Issue("warning", f"unknown key `{key}`",
                            f"brewkb keys are {', '.join(KNOWN_KEYS)}; remove it or ignore this", key))
    if not recipe.body.strip():
        issues.append(Issue("error", "empty body",
                            "write at least a `## How to perform` section", None))
    return issues
