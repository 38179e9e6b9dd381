"""The recipe linter: every problem as ``path:line: severity: message — what to do``.

Besides the recipe format, it reads every recipe as text that may have come
from untrusted logs (docs/security.md), hand-written ones too:

- **secrets** (errors; detect-secrets, shown masked) and **personal data**
  (warnings; the ``[scrub]`` patterns);
- **invisible characters** (errors): zero-width, bidi controls, Unicode tag
  characters and other control or format characters, which hide text from a
  reviewer;
- **ids** (warnings): tokens shaped like identifiers (``W2905754``) in the
  description and body, code spans left out (tool names are not ids);
- **links** and **HTML** (warnings): an agent that is served the recipe may
  follow or render them;
- **instruction-like text** (warnings): words addressed to the assistant,
  "ignore previous …", claimed policies — the rules of
  ``brewkb.trajectories.instructions``, by which ``quote`` holds back log text;
- **tools the agent does not have** (errors), when ``tools.known`` in
  ``brewkb.toml`` lists the agent's tools: a call of any other tool, or an
  argument not listed for a tool listed with its arguments.
"""

from __future__ import annotations

import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from brewkb.config import Signatures
from brewkb.errors import BrewError, RecipeError
from brewkb.fsutil import write_atomic
from brewkb.recipes import BOM, parse_recipe, validate
from brewkb.trajectories.boundary import invisible
from brewkb.trajectories.instructions import (
    ASKS_FOR_A_SECRET,
    DIRECTS_A_CALL,
    LINK,
    MARKUP,
    REASONS,
    RULE_FOR_READER,
    TO_THE_AGENT,
    instruction_reason,
    is_html,
)
from brewkb.trajectories.scrub import ID_SHAPE, Scrubber
from brewkb.trajectories.secrets import SECRET
from brewkb.trajectories.tools import (
    CALLED,
    COMPOUND,
    NAMED,
    NOT_THE_AGENTS,
    line_calls,
    not_the_agents,
    passed_names,
)

__all__ = ["Problem", "lint_paths", "lint_files", "lint_text", "personal_data", "untrusted_text", "unknown_tools",
           "recipe_files", "fix_bom"]


@dataclass(frozen=True)
class Problem:
    path: str
    line: int
    severity: str  # "error" | "warning"
    message: str
    hint: str

    def format(self) -> str:
        return f"{self.path}:{self.line}: {self.severity}: {self.message} — {self.hint}"

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def recipe_files(paths: Iterable[Path]) -> list[Path]:
    """Expand folders to the ``*.md`` files below them (links included); a missing path is an error."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*.md") if p.is_file() or p.is_symlink()))
        elif path.is_file():
            files.append(path)
        else:
            raise BrewError(f"{path}: no such file or folder; pass recipe files or folders")
    return files


def _key_lines(text: str) -> dict[str, int]:
    """1-based line of each top-level front matter key."""
    lines: dict[str, int] = {}
    for number, line in enumerate(_lines(text)[1:], start=2):
        if re.match(r"^-{3,}\s*$", line):
            break
        match = re.match(r"^([^\s#:][^:]*?)\s*:", line)
        if match:
            lines.setdefault(match.group(1).strip("'\""), number)
    return lines


def _lines(text: str) -> list[str]:
    """The lines of ``text`` as git and editors number them: split at line feeds only, so a Unicode
    line or paragraph separator stays in its line, where the invisible-character check sees it."""
    return [line.removesuffix("\r") for line in text.split("\n")]


def _body_line(text: str) -> int:
    lines = _lines(text)
    for number, line in enumerate(lines[1:], start=2):
        if re.match(r"^-{3,}\s*$", line):
            return number + 1
    return 1


def personal_data(path: str, text: str, scrubber: Scrubber | None = None) -> list[Problem]:
    """A warning per line that holds what looks like personal data, an error per secret (shown masked)."""
    problems = []
    for finding in (scrubber or Scrubber.build()).find(text):
        if finding.kind == SECRET:
            problems.append(Problem(path, finding.line, "error", f"looks like a secret: {finding.text[:4]!r}… "
                                    f"({len(finding.text)} characters)", "remove it and revoke the key or token; "
                                    "recipes must never carry secrets"))
            continue
        shown = finding.text if len(finding.text) <= 40 else finding.text[:39] + "…"
        problems.append(Problem(path, finding.line, "warning", f"looks like personal data ({finding.kind}): {shown!r}",
                                f"replace it with <{finding.kind}>; recipes must not carry customer data"))
    return problems


_CODE_SPAN = re.compile(r"`[^`\n]*`")
_QUOTATION = re.compile(r'"([^"\n]+)"|“([^”\n]+)”')
_FRONT_KEYS_READ = ("description",)
"""Front matter keys whose text is read like the body (the others hold names, ids and provenance)."""


def untrusted_text(path: str, text: str) -> list[Problem]:
    """Invisible characters, ids, links, HTML and instruction-like text, one problem per line and kind."""
    problems = []
    lines = _lines(text)
    body_from = _body_line(text)
    for number, line in enumerate(lines, start=1):
        hidden = invisible(line[1:] if number == 1 and line.startswith("\ufeff") else line)  # a BOM: its own check
        if hidden:
            shown = ", ".join(hidden[:5])
            problems.append(Problem(path, number, "error", f"invisible or control characters ({shown})",
                                    "delete them: they hide or reorder text a reviewer reads"))
        in_body = number >= body_from
        if not in_body and not re.match(rf"^(?:{'|'.join(_FRONT_KEYS_READ)})\s*:|^\s+\S", line):
            continue
        plain = _CODE_SPAN.sub(" ", line)
        ids = [m.group(0) for m in ID_SHAPE.finditer(plain)]
        if ids:
            problems.append(Problem(path, number, "warning", "looks like an id: " + ", ".join(
                                        repr(found[:40]) for found in dict.fromkeys(ids)),
                                    "replace it with a placeholder such as <order_id>; recipes must not carry the "
                                    "ids of customers or records"))
        content = re.sub(r"^\s*(?:#{1,6}|[-*+]|\d+[.)])\s+", "", plain)
        if instruction_reason(content, skip=[r for r in REASONS if r != LINK]) == LINK:
            problems.append(Problem(path, number, "warning", "a link",
                                    "an agent served this recipe may follow it: remove it unless your team put it "
                                    "there and trusts where it leads"))
        reason = instruction_reason(content, skip=(RULE_FOR_READER, TO_THE_AGENT, DIRECTS_A_CALL, MARKUP, LINK,
                                                     ASKS_FOR_A_SECRET))
        # a quotation is what a log said: it is read by every rule for log text
        reason = reason or next((r for m in _QUOTATION.finditer(content)
                                 if (r := instruction_reason(m.group(1) or m.group(2), skip=(MARKUP, LINK)))), None)
        if reason is not None:
            problems.append(Problem(path, number, "warning", f"reads as instructions to an agent ({reason})",
                                    "check that your team wrote this line; text copied from a log must not tell an "
                                    "agent what to do (docs/security.md)"))
        if is_html(plain):
            problems.append(Problem(path, number, "warning", "HTML",
                                    "remove the tags: an agent or a viewer may render them"))
    return problems


def unknown_tools(path: str, text: str, known: Signatures) -> list[Problem]:
    """An error per body line that calls a tool the agent's ``known`` tools do not hold (none when empty),
    in code form or written out (``issue_gift_card(order_id)``), or passes an argument not listed for it;
    a warning per line that names such a tool in backticks without a call ("Call `issue_gift_card` …":
    a name of two words or more that is no listed tool, and no argument listed or passed in the recipe)."""
    problems = []
    arguments = {a for names in known.values() for a in names or ()} | passed_names(text)
    for number, line in enumerate(_lines(text)[_body_line(text) - 1:], start=_body_line(text)):
        line = unicodedata.normalize("NFKC", line)  # fullwidth parentheses are parentheses
        calls = line_calls(line, arguments)
        others = [name for name in dict.fromkeys([*CALLED.findall(line), *(t for t, _ in calls)])
                  if not_the_agents(name, known)]
        if others:
            problems.append(Problem(path, number, "error", "calls " + ", ".join(f"`{n}`" for n in others) +
                                    f", {NOT_THE_AGENTS}", "remove the step, or add the tool to tools.known if "
                                    "your agent has it"))
        unlisted = list(dict.fromkeys((tool, a) for tool, arguments in calls if (listed := known.get(tool)) is not None
                                      for a in (x.split("=")[0].strip() for x in arguments.split(","))
                                      if re.fullmatch(r"[A-Za-z_][\w.-]*", a) and a not in listed))
        if unlisted:
            problems.append(Problem(path, number, "error", "passes " + ", ".join(f"`{a}` to `{t}`" for t, a in
                                                                                 unlisted)
                                    + ", an argument tools.known does not list for it",
                                    "remove the argument, or list it with the tool in tools.known"))
        named = [n for n in dict.fromkeys(NAMED.findall(line)) if COMPOUND.search(n) and not_the_agents(n, known)
                 and n not in arguments and n not in others]
        if named:
            problems.append(Problem(path, number, "warning", "names " + ", ".join(f"`{n}`" for n in named) +
                                    f" in backticks, {NOT_THE_AGENTS}: an agent may take it for a call",
                                    "if your agent has the tool, add it to tools.known; else remove it, or write "
                                    "it without backticks"))
    return problems


def lint_text(path: str, text: str, scrubber: Scrubber | None = None,
              known: Signatures | None = None) -> tuple[list[Problem], str | None]:
    """Problems of one file's text, and the recipe name it declares (if it parses)."""
    read = personal_data(path, text, scrubber) + untrusted_text(path, text) + unknown_tools(path, text, known or {})
    try:
        recipe = parse_recipe(text)
    except RecipeError as exc:
        return [Problem(path, exc.line or 1, "error", *_split_hint(str(exc))), *read], None
    key_lines = _key_lines(text)
    stem = Path(path).stem
    problems = [
        Problem(path, key_lines.get(issue.key, 1) if issue.key else _body_line(text),
                issue.severity, issue.message, issue.hint)
        for issue in validate(recipe, stem=stem)
    ]
    return problems + read, recipe.name or None


def _split_hint(message: str) -> tuple[str, str]:
    """Recipe errors end with what to do after the last '; ' or ' (' clause."""
    if "; " in message:
        head, hint = message.rsplit("; ", 1)
        return head, hint
    return message, "see docs/recipes.md for the format"


def _escapes(file: Path, folders: list[Path]) -> Path | None:
    """Where ``file`` leads when that is outside the folder it was found in (or, for a
    file named on its own, outside its own folder) or is not a file, else ``None``."""
    target = file.resolve()
    inside = [f for f in folders if file.absolute().is_relative_to(f.absolute())] or [file.absolute().parent]
    return None if target.is_file() and any(target.is_relative_to(f.resolve()) for f in inside) else target


def lint_paths(paths: Iterable[Path], scrubber: Scrubber | None = None, max_kb: int = 256,
               known: Signatures | None = None) -> list[Problem]:
    """Lint recipe files and folders, including names duplicated across files,
    links that lead outside their folder, files over ``max_kb``, (as
    warnings) personal data by ``scrubber``'s patterns (default ones when
    ``None``) and calls of tools the agent's ``known`` tools do not hold."""
    problems: list[Problem] = []
    files: dict[str, bytes] = {}
    sizes: dict[str, int] = {}
    paths = list(paths)
    folders = [p for p in paths if p.is_dir()]
    for file in recipe_files(paths):
        if (target := _escapes(file, folders)) is not None:
            problems.append(Problem(str(file), 1, "error", f"leads to {target}, outside the recipes folder; "
                                    "brewkb does not read it", "put the recipe's text in the file itself"))
            continue
        size = file.stat().st_size
        files[str(file)] = b"" if size > max_kb * 1024 else file.read_bytes()
        sizes[str(file)] = size
    return sorted(problems + lint_files(files, scrubber, max_kb, sizes, known),
                  key=lambda p: (p.path, p.line, p.message))


def lint_files(files: Mapping[str, bytes], scrubber: Scrubber | None = None, max_kb: int = 256,
               sizes: Mapping[str, int] | None = None, known: Signatures | None = None) -> list[Problem]:
    """Lint recipe files given as path → bytes (a folder read from disk, or a
    revision's folder read from git): each file, and names duplicated across them."""
    problems: list[Problem] = []
    seen: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for path, data in sorted(files.items()):
        size = (sizes or {}).get(path, len(data))
        if size > max_kb * 1024:
            problems.append(Problem(path, 1, "error", f"is {size // 1024} KB, over kb.max_recipe_kb "
                                    f"({max_kb} KB); the index leaves it out",
                                    "split it into recipes of one concept each, or raise kb.max_recipe_kb"))
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            problems.append(Problem(path, 1, "error", "file is not UTF-8 text", "save it as UTF-8"))
            continue
        found, name = lint_text(path, text, scrubber, known)
        problems.extend(found)
        if name:
            seen[name].append((path, _key_lines(text).get("name", 1)))
    for name, places in seen.items():
        for path, line in places[1:]:
            problems.append(Problem(
                path, line, "error", f"duplicate name {name!r}, also in {places[0][0]}",
                "give each recipe its own name (and file)"))
    return sorted(problems, key=lambda p: (p.path, p.line, p.message))


def fix_bom(paths: Iterable[Path]) -> list[Path]:
    """Remove a UTF-8 byte-order mark from the given recipe files; returns the files fixed."""
    fixed = []
    paths = list(paths)
    folders = [p for p in paths if p.is_dir()]
    for file in recipe_files(paths):
        if _escapes(file, folders) is not None:
            continue  # never read nor rewritten; lint reports it
        raw = file.read_bytes()
        if raw.startswith(BOM.encode("utf-8")):
            write_atomic(file, raw[len(BOM.encode("utf-8")) :])
            fixed.append(file)
    return fixed
