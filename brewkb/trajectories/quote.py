"""Quoting log text into a recipe: the one place that decides what of a log
a recipe may say, and how.

``quote(text)`` returns the text made safe to write on one line of markdown,
or *holds it back* with the reason:

- **made safe**: normalised (``boundary.normalise``), made one line (so it
  can never start a heading, a list item or a section), markup characters
  replaced by plain look-alikes (backticks and double quotes by ``'``, so
  a quotation of it ends where it should; brackets by parentheses; angle
  brackets that are not a placeholder such as ``<email>`` by ``‹ ›``), any
  id-shaped token left replaced by ``<id>``,
  and cut to a length.
- **held back** when the text reads as instructions to an agent, by eight
  general rules (``instruction_reason``), none of them about one log:

  1. *addressed to the assistant*: words addressed to an assistant, system,
     model or agent by that name ("AI: …", "note to the assistant", "you are
     an AI"), chat-template tokens (``<|im_start|>``, ``[INST]``); or to
     someone other than whom it was said to (staff by their role: "Supervisor
     note", "Staff: …"; "to whoever reads this");
  2. *overrides its instructions*: "ignore / disregard / forget / override /
     bypass / skip" + "previous / above / prior / system" or + (up to two
     words, then) "instructions / rules / policy / prompt / guidelines /
     checks / verification"; "forget / ignore what you were told"; "no need
     to check / verify / follow" + (up to two words, then) "rules / policy /
     identity / eligibility …";
  3. *claims a policy or rule*: "new / updated / revised / official /
     internal … policy / rule / instructions", "policy update", "system
     prompt"; and *a rule for whoever reads it*: a sentence that starts with
     "always" or "never", says "you / the agent must (always / never /
     not) …", or (for log text, not a recipe's own lines) tells an agent,
     assistant or model in the third person what it must, should or has
     to do;
  4. *links*: URLs (any scheme, ``www.``, a host with a path, a bare host
     with a common ending, a host written so that no link is made of it:
     ``hxxps``, ``example(.)com``, ``example dot com``), markdown links and
     images;
  5. *directs a tool call* (log text only: a recipe's own lines name the
     calls an agent makes): a verb of calling ("call", "invoke", "run",
     "use", …) before a name in code form (``force_cancel_order``,
     ``forceCancel``, ``force(…)``; letters only, as an id holds digits),
     or a flag set in code form (``override=true``): people ask for what
     they want done, a text that names the call to make speaks to the agent;
  6. *code or markup*: HTML (found by ``nh3``, the HTML sanitiser; the
     placeholders brewkb writes are not HTML), code fences, markdown
     headings, template tags;
  7. *asks for a secret*: asking to give, read out or share a card number,
     its security code, a password, PIN or one-time code;
  8. *hides its words*: ten letters or more each standing alone.

The rules read small capitals as the letters they are, letters of other
scripts that look Latin (Cyrillic ``о``, Greek ``ο``) as the Latin letter,
and the rules of words (1 to 3) read the text backwards too: a bidirectional override shows reversed text the right
way round, and ``normalise`` has removed the override, not the words.

A held-back text is not written into the recipe; ``held_back`` lists such
texts of a set of trajectories with their reason and the conversations they
came from, for the pull request to show a reviewer ("Held back from the
logs"). ``screen`` applies the same rules to a recipe an LLM wrote: a line
with a sentence that reads as instructions and repeats log text (four words
in a row, or a link) is dropped.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache

from brewkb.trajectories.boundary import normalise
from brewkb.trajectories.schema import Trajectory, tool_calls
from brewkb.trajectories.scrub import ID_SHAPE

__all__ = ["Quote", "HeldBack", "quote", "instruction_reason", "name_reason", "held_back", "log_texts", "read_texts",
           "screen", "MAX_QUOTE", "LogIndex", "Copies", "COPIES", "shown", "is_html", "RULE_FOR_READER", "TO_THE_AGENT", "DIRECTS_A_CALL", "LINK",
           "MARKUP", "ASKS_FOR_A_SECRET", "HIDES_ITS_WORDS",
           "REASONS"]

MAX_QUOTE = 240
"""Characters a quoted text keeps by default."""
SHOWN = 200
"""Characters of a held-back text the PR shows."""

RULE_FOR_READER = "a rule for whoever reads it"
TO_THE_AGENT = "tells an agent what to do"
"""Part of rule 3 for log text only: a recipe's own lines tell the agent what to do."""
DIRECTS_A_CALL = "directs a tool call"
"""Rule 5, for log text only: a recipe's own lines name the calls the agent makes."""
LINK = "a link"
MARKUP = "code or markup"
ASKS_FOR_A_SECRET = "asks for a secret"
"""Rule 7: someone asked to say a card number, a security code or a password (a recipe's line may warn against it)."""
HIDES_ITS_WORDS = "hides its words"
"""Rule 8: ten letters or more each standing alone ("i g n o r e …"), a way to slip words past the others."""
_ROLE = r"(?:ai|assistant|agent|model|llm|chatbot|bot|system|gpt|claude|language model)"
_TLD = (r"(?:com|net|org|info|biz|io|co|ai|app|dev|xyz|top|site|online|shop|store|link|click|live|ly|gl|cc|ws|tk"
        r"|ru|cn|uk|de|fr|nl|eu|us|ca|au|in|br|jp|su|pw|icu|club|vip|example|test|invalid|local|internal|onion|corp"
        r"|lan|localhost|help|support|pro|travel|me|tv|cloud|tech|page|world|email|services|center|solutions|zone"
        r"|network|digital|agency|global|bank|pay|money|finance|systems|company|business|group|care|express)")
"""Endings of host names that a bare one is read by (a link needs no scheme to be followed)."""
_OVERRIDE_VERB = (r"(?i:ignorier(?:e|en|t)?|vergiss|vergessen|missachte|umgehe|überspringe|ignore[rz]?|oublie[rz]?"
                  r"|contourne[rz]?|ignora[rn]?|olvida[rn]?|omite|omitir|salta[rn]?|dimentica(?:re)?|ignorare"
                  r"|esque[çc]a|pule)")
_RULE_NOUN = (r"(?i:anweisungen|regeln|richtlinien|vorgaben|prüfung(?:en)?|überprüfung(?:en)?|verifizierung"
              r"|instructions|règles|consignes|vérifications?|politiques?|instrucciones|reglas|verificaci[oó]n|pol[ií]ticas?"
              r"|istruzioni|regole|verifica|instru[çc][õo]es|regras|verifica[çc][ãa]o)")
"""Rule 2 in other languages than English: verbs of ignoring or skipping, and what is ignored."""
_STAFF = (r"(?:staff|supervisor|manager|management|admin|administrator|operator|moderator|headquarters|reps?"
          r"|representatives?|team leads?|reviewers?|customer care(?: team)?|support team|ops|operations"
          r"|(?:ops|operations|support|service) desk)")
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("addressed to the assistant", re.compile(
        rf"(?im)(?:^|[.!?]\s+)\s*{_ROLE}\s*:"
        r"|\b(?:dear|hey|attention|note to|message to|instructions? (?:to|for)|reminder (?:to|for))\s+"
        rf"(?:the\s+|my\s+|our\s+)?{_ROLE}\b"
        rf"|\b(?:you are|you're|act as|pretend to be|as an?|you,? the)\s+(?:now\s+)?(?:an?\s+)?(?:helpful\s+)?"
        r"(?:ai|assistant|language model|llm|chatbot|large language model)\b"
        r"|<\|[^|>\n]{1,40}\|>|\[/?INST\]|<</?SYS>>|#{2,}\s*(?:instruction|system|response)\b"
        # a note for someone other than whom it was said to: staff, or whoever reads it
        rf"|(?:^|[.!?]\s+)\s*{_STAFF}\s*:|\b{_STAFF}\s+(?:notes?|messages?|memos?|reminders?|instructions?)\b"
        rf"|\b(?:notes?|messages?|memos?|reminders?|instructions?)\s+(?:from|for|to)\s+(?:the\s+|your\s+|our\s+)?"
        rf"(?:[a-z]+\s+){{0,2}}{_STAFF}\b|\b(?:dear|attn|attention)\b\W{{0,3}}(?:the\s+)?(?:[a-z]+\s+){{0,2}}{_STAFF}\b"
        rf"|\b(?:to|for)\s+(?:the\s+|our\s+|your\s+)?(?:[a-z]+\s+){{0,2}}{_STAFF}\s+(?:who\s+)?(?:reads|reading|reviews"
        r"|reviewing|handles|handling|sees|processes|processing)\b"
        r"|\b(?:to|for)\s+(?:whoever|the\s+(?:person|people|one)|anyone|someone)\s+(?:who\s+)?(?:reads|is reading"
        r"|reading|handles|is handling|handling|sees|gets|processes|picks up|reviews|is reviewing|reviewing)\b")),
    ("overrides its instructions", re.compile(
        r"(?i)\b(?:ignore|disregard|forget|override|bypass|circumvent|skip)\s+(?:all\s+|any\s+|every\s+|the\s+|"
        r"your\s+|these\s+|those\s+|of\s+)*(?:(?:previous|prior|above|earlier|preceding|original|system|safety|usual)"
        r"\b|(?:[a-z]+[\s-]+){0,2}(?:instructions?|rules?|prompts?|polic(?:y|ies)|guidelines?|directives?|checks?"
        r"|verifications?|authentications?)\b)"
        r"|\bwithout\s+(?:a\s+|any\s+|the\s+)?(?:[a-z]+[\s-]+){0,2}(?:checks?|checking|verification|verifying"
        r"|authentication)\b"
        r"|\bno\s+(?:[a-z]+[\s-]+){0,2}(?:checks?|verification|authentication|identity)\s+(?:is\s+|are\s+)?"
        r"(?:needed|required|necessary)\b"
        r"|\b(?:no need|not necessary|unnecessary|(?:do|does|did)(?:n't| not) need)\s+(?:for\s+\w+\s+)?to\s+"
        r"(?:check|verify|validate|authenticate|review|follow|apply)\s+(?:[a-z]+[\s-]+){0,2}(?:rules?|polic(?:y|ies)"
        r"|identity|id|verification|eligibility|requirements?|restrictions?|conditions?|checks?)\b"
        r"|\b(?:ignore|disregard|forget)\s+(?:what|everything|anything|all)\s+(?:that\s+)?(?:you|you've|you'?ve)\s+"
        r"(?:were|was|have been|had been|'ve been|are|got)?\s*(?:told|instructed|given|taught|asked)\b"
        # the same in other languages: a verb of ignoring or skipping, then instructions, rules or checks
        rf"|\b{_OVERRIDE_VERB}\s+(?:[^\W\d_]+[\s,]+){{0,4}}?{_RULE_NOUN}\b"
        rf"|\b{_RULE_NOUN}\s+(?:[^\W\d_]+\s+){{0,2}}?(?i:ignorieren|vergessen|überspringen|umgehen|missachten)\b"
        rf"|(?:忽略|无视|忽视|忘记|跳过|無視|忘れ)[^。.!?]{{0,12}}(?:指示|指令|规则|規則|规定|验证|核实|检查|ルール|確認)")),
    ("claims a policy or rule", re.compile(
        r"(?i)\b(?:new|updated|revised|official|internal|special|secret|changed|latest)\s+(?:company\s+|store\s+|"
        r"support\s+)?(?:polic(?:y|ies)|rules?|instructions?|guidelines?|directives?|procedures?)\b"
        r"|\bpolicy\s+(?:update|change|override|exception)\b|\b(?:system|developer)\s+(?:prompt|message|note)\b"
        # a rule for everyone: "refunds are approved for every delayed passenger"
        r"|\b(?:are|is)\s+(?:now\s+|always\s+|automatically\s+)?(?:approved|allowed|permitted|free|waived|granted"
        r"|authori[sz]ed|eligible|exempt)\s+(?:for|to)\s+(?:every|all|any|everyone|everybody|anyone)\b"
        # a rule said to begin now, or decided by someone who is not in the conversation
        r"|\b(?:from now on|going forward|effective (?:immediately|today|now))\b"
        r"|\b(?:is|are)\s+(?:now\s+optional|optional\s+for)\b"
        rf"|\b{_STAFF}\s+(?:has|have)\s+(?:now\s+|already\s+)?(?:approved|authori[sz]ed|decided|agreed|allowed)\b")),
    (RULE_FOR_READER, re.compile(
        r"(?i)(?:^|[.!?:;]\s+|\n\s*)(?:always|never)\s+(?!mind\b)[a-z]+"
        r"|\b(?:you|agents?|assistants?|the agent|the assistant)\s+(?:must|should|shall|are to|have to|need to)\s+"
        r"(?:always|never|not|no longer)\b|\bmust (?:always|never)\b")),
    (TO_THE_AGENT, re.compile(
        r"(?i)\b(?:the|an?|our|your|every|any)\s+(?:(?:ai|support|virtual|customer)\s+)?"
        r"(?:agent|assistant|ai|model|bot|chatbot|llm)s?\s+(?:also\s+|now\s+|always\s+)?(?:must|should|shall"
        r"|(?:is|are)\s+(?:to|required to|expected to)|(?:has|have|needs?)\s+to)\b")),
    (LINK, re.compile(
        r"(?i)\b(?:https?|ftp|file|data|javascript|vbscript)\s*:\s*/*\S+|(?<![a-z0-9])www\d?\.\S+"
        # a host and its path, a markdown link: begun where a word begins, each part bounded (no backtracking)
        r"|(?<![a-z0-9.-])[a-z0-9-]{1,63}(?:\.[a-z0-9-]{1,63}){0,8}\.[a-z]{2,24}/\S*"
        r"|!?\[[^\]\n]{0,500}\]\([^)\n]{0,2000}\)|^\s*\[[^\]\n]+\]:\s*\S+"
        # a bare host, or one written so that no link is made of it (hxxp, example(.)com, example dot com)
        rf"|(?<![\w.@-])[a-z0-9-]{{1,63}}(?:\.[a-z0-9-]{{1,63}}){{0,8}}\.{_TLD}\b(?![.-]?\w)"
        r"|\bh(?:xx|\*\*|XX)ps?\b|[a-z0-9]\s?(?:\[\.\]|\(\.\)|\{\.\}|\[dot\]|\(dot\)|\{dot\})\s?[a-z0-9]"
        rf"|\b[a-z0-9-]{{2,63}}\s+dot\s+{_TLD}\b")),
    (DIRECTS_A_CALL, re.compile(
        # a name in code form: snake_case, camelCase or written as a call; letters only (an id holds digits)
        r"\b(?i:call|calls|calling|invoke|run|execute|use|trigger|try|perform|then|proceed(?:\s+directly)?\s+(?:to|with))"
        r"\s+(?i:the\s+|a\s+)?"
        r"(?i:(?:tool|function|api|endpoint|method)\s+)?['\"`]?"
        r"(?:[A-Za-z]+(?:_[A-Za-z]+)+\b|[a-z]{2,}(?:[A-Z][a-z]+)+\b|[A-Za-z_]+\()"
        r"|(?i:\b[a-z]+(?:_[a-z]+)*\s*=\s*['\"]?(?:true|false)\b)")),
    (MARKUP, re.compile(r"```|~~~|^\s{0,3}#{1,6}\s|\{\{[^}]{0,1000}\}\}|\{%[^%]{0,1000}%\}|<!--|<\?|<!\w", re.M)),
    (ASKS_FOR_A_SECRET, re.compile(
        r"(?i)\b(?:ask|asks|asking|request|requests|read|reads|reading|provide|give|tell|share|send|repeat|collect"
        r"|obtain|enter|type|spell|get|fetch|retrieve|capture)\b(?:\s+[\w'-]+){0,8}?\s+(?:(?:full|whole|complete|entire|stored|saved)\s+)?"
        r"(?:(?:credit\s+|debit\s+|payment\s+)?card(?:'s)?\s+(?:numbers?|digits)|cvv2?|cvc2?|security\s+codes?"
        r"|(?:three|3|four|4)\s+digits\s+on\s+the\s+back|passwords?|passcodes?|passphrases?|pin\s+(?:codes?|numbers?)"
        r"|one[- ]time\s+(?:codes?|passwords?)|otp|social\s+security\s+numbers?)\b")),
    (HIDES_ITS_WORDS, re.compile(r"(?<!\S)(?:[^\W\d_]\s{1,2}){9,}[^\W\d_](?!\S)")),
)
REASONS = tuple(reason for reason, _ in _RULES)
"""Every reason ``instruction_reason`` may give, in the order it tries them."""
_WORD_RULES = 3
"""The first rules, of words alone: they are read backwards too."""
_CYRILLIC = "аАвВеЕһҺіІјЈкКмМнНоОрРсСтТуУхХѕЅԁԛԝӏ"
_GREEK = "αΑβΒεΕζΖηΗιΙκΚμΜνΝοΟρΡτΤυΥχΧ"
_LATIN_LOOK = str.maketrans(_CYRILLIC + _GREEK, "aABBeEhhiIjJkKMMHHoOpPcCTTyYxXsSdqwl" + "aABBeEZZnHiIkKuMvNoOpPtTuYxX")
"""Letters of other scripts that look like Latin ones (as spoofed text uses them),
read as the Latin letter they look like; NFKC has already folded fullwidth and
mathematical forms."""
_SMALL_CAPITALS = str.maketrans({chr(c): unicodedata.name(chr(c))[-1].lower() for c in (
    *range(0x0250, 0x02B0), *range(0x1D00, 0x1D80), *range(0xA720, 0xA800))
    if re.fullmatch(r"LATIN LETTER SMALL CAPITAL [A-Z]", unicodedata.name(chr(c), ""))})
"""Small capital letters (``ɪɢɴᴏʀᴇ``), which NFKC leaves as they are, read as the letters they are."""
_PLACEHOLDER = re.compile(r"<[a-z][a-z0-9_]*>")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_DANGEROUS_TAGS = frozenset("""script style iframe frame frameset object embed applet svg math form input button
textarea select option link meta base html head body title template slot video audio source track canvas
noscript xml xmp plaintext marquee dialog portal param picture""".split())


@cache
def _html_tags() -> frozenset[str]:
    import nh3

    return frozenset(nh3.ALLOWED_TAGS) | _DANGEROUS_TAGS


def _placeholders_hidden(text: str) -> str:
    """``text`` with brewkb's placeholders (``<email>``) out of the way of an HTML parser."""
    tags = _html_tags()
    return _PLACEHOLDER.sub(lambda m: m.group(0) if m.group(0)[1:-1] in tags else "", text)


def _is_html(text: str) -> bool:
    """Whether ``text`` holds an HTML tag, comment or entity-free markup, as nh3 parses it."""
    if "<" not in text:
        return False
    import nh3

    bare = _placeholders_hidden(text)
    return "<" in bare and nh3.is_html(bare)


def instruction_reason(text: str, skip: Iterable[str] = ()) -> str | None:
    """Why ``text`` reads as instructions to an agent (one of the module
    docstring's rules, but those named in ``skip``), or ``None``."""
    normal = normalise(text, 100_000).translate(_LATIN_LOOK).translate(_SMALL_CAPITALS)
    backwards = normal[::-1]  # what a bidi override (removed by normalise) showed reversed
    skipped = set(skip)
    for number, (reason, rule) in enumerate(_RULES):
        if reason not in skipped and (rule.search(normal) or number < _WORD_RULES and rule.search(backwards)):
            return reason
    if MARKUP not in skipped and _is_html(normal):
        return MARKUP
    return None


def name_reason(name: str) -> str | None:
    """Why a name a log gave (a tool's, an argument's, a concept's) reads as
    instructions when read as words (``skip_identity_verification`` → "skip
    identity verification", ``skipIdentityCheck`` too), or as a host
    (``see_evil-help.com``), or ``None``."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)  # camel case: skipIdentityCheck
    words = re.sub(r"[_.-]+", " ", spaced)
    # a name leaves its articles out: agent_must_refund_in_full says "the agent must refund in full"
    return instruction_reason(words) or instruction_reason(spaced.replace("_", " ")) or \
        instruction_reason(f"the {words}")


def is_html(text: str) -> bool:
    """Whether ``text`` holds HTML (brewkb's placeholders such as ``<email>`` are not)."""
    return _is_html(normalise(text, 100_000))


@dataclass(frozen=True)
class Quote:
    """A log text as a recipe may write it (``text``), or held back (``held``, the reason, and ``text`` empty)."""

    text: str
    held: str | None = None

    def __bool__(self) -> bool:
        return self.held is None and bool(self.text)


_LOOKALIKE = str.maketrans({"`": "'", "[": "(", "]": ")", "|": "/", "\\": "/", '"': "'", "“": "'", "”": "'"})


def _plain(line: str) -> str:
    """One line with markup characters replaced by plain look-alikes (placeholders kept)."""
    line = line.translate(_LOOKALIKE)
    parts = re.split(r"(<[a-z][a-z0-9_]*>)", line)
    return "".join(p if _PLACEHOLDER.fullmatch(p) else p.replace("<", "‹").replace(">", "›") for p in parts)


def _bounded(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def quote(text: str | None, limit: int = MAX_QUOTE) -> Quote:
    """``text`` from a log as a recipe may quote it, or held back (see the module docstring)."""
    normal = normalise(text or "", 100_000)
    reason = instruction_reason(normal)
    if reason is not None:
        return Quote("", reason)
    line = " ".join(normal.split())
    line = ID_SHAPE.sub("<id>", line)  # ids are data: none reaches a recipe, marked or not
    return Quote(_bounded(_plain(line), limit))


def shown(text: str) -> str:
    """A held-back text as a reviewer sees it in the PR: one plain line, cut,
    meant to sit in a code span (no link or markup renders there)."""
    return _bounded(" ".join(normalise(text, 100_000).replace("`", "'").split()), SHOWN)


# ------------------------------------------------------------------ held back
@dataclass
class HeldBack:
    """A text of the logs held back, why, and the trajectories it came from."""

    text: str
    reason: str
    sources: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"text": self.text, "reason": self.reason, "sources": list(self.sources)}


def log_texts(trajectory: Trajectory) -> list[str]:
    """What of a trajectory rules quote into recipes: the task, the user's
    turns and the first line of each failed tool call's result."""
    texts = [trajectory.task] if trajectory.task.strip() else []
    texts += [str(m["content"]) for m in trajectory.messages
              if m.get("role") == "user" and isinstance(m.get("content"), str) and m["content"].strip()]
    texts += [(c.result or "").strip().splitlines()[0] for c in tool_calls(trajectory.messages)
              if c.error and (c.result or "").strip()]
    return texts


def _result_texts(result: str) -> list[str]:
    """A tool's result as the rules read it for the PR: each string of a JSON result, else each line."""
    try:
        value = json.loads(result)
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict | list):
        return [line for line in result.splitlines() if line.strip()]
    texts: list[str] = []
    stack: list[object] = [value]
    while stack:  # without recursion: a result's depth is bounded at import, and never trusted
        item = stack.pop()
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, dict):
            stack.extend(reversed([*item.keys(), *item.values()]))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return texts


def read_texts(trajectory: Trajectory) -> list[str]:
    """The texts of a trajectory that others wrote, once each: what rules quote
    (``log_texts``) and every string of every tool result, which an LLM role
    reads though no rule quotes a result that did not fail. The agent's own
    turns are not among them: no rule quotes them, and a model's markdown and
    talk of policy would read as instructions."""
    results = [text for call in tool_calls(trajectory.messages) if call.result for text in _result_texts(call.result)]
    return list(dict.fromkeys([*log_texts(trajectory), *results]))


def held_back(trajectories: Iterable[Trajectory]) -> list[HeldBack]:
    """Every text of ``trajectories`` (``read_texts``) that ``quote`` holds
    back, once, with the ids of the trajectories it came from, in order of
    first seen."""
    found: dict[str, HeldBack] = {}
    for trajectory in trajectories:
        for text in read_texts(trajectory):
            reason = instruction_reason(text)
            if reason is None:
                continue
            item = found.setdefault(shown(text), HeldBack(shown(text), reason))
            if trajectory.id not in item.sources:
                item.sources.append(trajectory.id)
    return list(found.values())


# ------------------------------------------------------------ written lines
COPIED_WORDS = 8
"""Words in a row of what users and tools said that a written line may not repeat outside double quotes."""
COPIES = "repeats the logs' words outside quotation marks"
_DOUBLE_QUOTED = re.compile(r'"[^"\n]*"|“[^”\n]*”')


class Copies:
    """What users and tools said in some conversations, to tell a written line that copies it: ``COPIED_WORDS``
    words in a row outside double quotes. A quotation is how a recipe quotes a log, and an agent is given it
    elided (``recipes.served``); copied words anywhere else — single or other quotation marks, a code span, a
    heading, a step — would reach an agent as the recipe's own."""

    def __init__(self, texts: Iterable[str]) -> None:
        self.grams: set[tuple[str, ...]] = set()
        for text in texts:
            self.grams |= _grams(text, COPIED_WORDS)

    def screen(self, text: str) -> tuple[str, list[tuple[str, str]]]:
        """``text`` without its lines that copy (what is kept, [(line, reason)])."""
        kept, dropped = [], []
        for line in text.split("\n"):
            if self.grams and _grams(_DOUBLE_QUOTED.sub(" ", line), COPIED_WORDS) & self.grams:
                dropped.append((line, COPIES))
            else:
                kept.append(line)
        return "\n".join(kept), dropped


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", normalise(text, 100_000).lower())


_URL = re.compile(r"(?i)(?:https?://|www\.)?[a-z0-9-]+(?:\.[a-z0-9-]+)*\.[a-z]{2,}(?:/\S*)?")


def _grams(text: str, n: int = 4) -> set[tuple[str, ...]]:
    words = _words(text)
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


class LogIndex:
    """The texts of some logs, to tell whether a line repeats them: four
    words in a row, or a host name (``evil.example``), of any one of them."""

    N = 4

    def __init__(self, texts: Iterable[str]) -> None:
        self.grams: set[tuple[str, ...]] = set()
        self.lower: list[str] = []
        for text in texts:
            self.grams |= _grams(text, self.N)
            self.lower.append(normalise(text, 100_000).lower())

    def shares(self, line: str) -> bool:
        if _grams(line, self.N) & self.grams:
            return True
        hosts = {m.group(0).lower().split("/")[0] for m in _URL.finditer(normalise(line, 100_000))}
        return any(h in text for h in hosts for text in self.lower)

    def wrote(self, line: str) -> bool:
        """Whether a recipe's line came from these logs: it quotes (a span in
        double quotes of three words or more) or repeats them, its steps'
        calls left out (a tool's name is an identifier, checked at import)."""
        text = re.sub(r"`[^`\n]*`", " ", line)
        return _QUOTED.search(text) is not None or self.shares(text)


_QUOTED = re.compile(r'"[^"\n]*?\w+\W+\w+\W+\w+[^"\n]*"')


_STRUCTURE = re.compile(r"^\s*(?:#{1,6}|[-*+]|\d+[.)])\s+")


def screen(body: str, texts: Sequence[str] | LogIndex) -> tuple[str, list[tuple[str, str]]]:
    """A recipe text (body or description) without the lines one of whose
    sentences reads as instructions and repeats log text (``texts``): (what is
    kept, [(line, reason)]). The sentence, not the line, is what must do both: a
    description is one line, and its one sentence naming a tool an error named
    does not make another one, telling the agent what to do, a quote."""
    index = texts if isinstance(texts, LogIndex) else LogIndex(texts)
    kept, dropped = [], []
    for line in body.split("\n"):
        content = _STRUCTURE.sub("", line)  # the recipe's own heading or list mark is not the line's content
        reason = next((r for s in _SENTENCE_END.split(content) if s.strip()
                       and (r := instruction_reason(s, skip=(TO_THE_AGENT, DIRECTS_A_CALL))) is not None
                       and index.shares(s)), None)
        if reason is not None:
            dropped.append((line, reason))
        else:
            kept.append(line)
    return "\n".join(kept), dropped
