"""Secrets in text: API keys, cloud keys, tokens, JWTs, private keys and
other high-entropy strings, found by ``detect-secrets`` (Yelp).

Why a library: each kind of secret has its own shape (a prefix, a checksum
segment, a length), providers add kinds every year, and detect-secrets keeps
one plugin class per kind (AWS, Azure, GitHub, GitLab, OpenAI, Slack, Stripe,
Twilio, JWT, private keys, basic-auth URLs, ``password = "…"`` keywords …)
with tests of its own. brewkb runs every plugin it ships on every text, and
adds what it does not cover for text that is not source code:

- **unquoted high-entropy tokens**: detect-secrets' entropy plugins look at
  quoted strings only (as in code); a key pasted into a chat is not quoted, so
  every run of 20 or more token characters is measured with the base64
  plugin's own Shannon entropy and limit (4.5); hex strings count only
  quoted, as detect-secrets reads them (an unquoted hash or trace id in a
  message is an id, not a key);
- **whole tokens**: a plugin may report part of a token (the JWT plugin stops
  before the signature); the whole token around a finding is replaced;
- **private key blocks**: the plugin finds the ``BEGIN … PRIVATE KEY`` line;
  the whole block, to its ``END`` line, is replaced;
- **keys by their prefix**: a token that begins as a provider's keys begin
  (``sk-``, ``sk_live_``, ``ghp_``, ``xoxb-``, ``AKIA`` …), whatever its entropy;
- **credentials named as such in prose**: the value after an HTTP auth scheme
  (``Authorization: Bearer 9f8e…``) or after a credential's name and ``is``,
  ``:`` or ``=`` (``api_key=…``, ``token: …``, ``client secret is …``), when it
  has a digit (``the token is expired`` names no secret). detect-secrets' own
  keyword plugin reads such assignments as code writes them, quoted.

No plugin ever verifies a secret over the network: ``analyze_string`` is
called directly, never the scan functions that can verify.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

__all__ = ["secret_spans", "SECRET"]

SECRET = "secret"
"""The placeholder kind of every secret (``<secret>``)."""

BASE64_LIMIT = 4.5
"""detect-secrets' entropy limit for base64 strings; its hex limit (3.0) is for quoted strings only here."""
_TOKEN_CHARS = r"A-Za-z0-9+/=_\-"
_LONG_TOKEN = re.compile(rf"[{_TOKEN_CHARS}]{{20,}}")
_TOKEN_EDGE = re.compile(rf"[{_TOKEN_CHARS}.~]*")
_PRIVATE_KEY = re.compile(r"-----BEGIN[A-Z ]*PRIVATE KEY[A-Z ]*-----.*?(?:-----END[A-Z ]*PRIVATE KEY[A-Z ]*-----|\Z)",
                          re.S)
_PLACEHOLDER = re.compile(r"<[a-z][a-z0-9_]*>")
_NAMED = re.compile(
    r"(?i:\b(?:bearer|basic|digest|token)\s+|\b(?:api[_ -]?key|apikey|access[_ -]?key(?:[_ -]?id)?"
    r"|(?:client[_ -]?|aws[_ -]?)?secret(?:[_ -]?(?:access[_ -]?)?key)?"
    r"|(?:auth|access|refresh|session|id|api)?[_ -]?token|credentials?"
    r"|(?:licen[cs]e|product|activation|serial)[_ -]?key)\b[\"']?\s*(?:(?:is|was)\s*|[:=]|=>)\s*[\"']?)"
    r"((?=[^\s\"',;<>]*\d)[^\s\"',;<>]{6,}|(?:(?<=[:=>])|(?<=[:=>]\s)|(?<=[:=>]\s[\"'])|(?<=[:=>][\"']))"
    r"[^\s\"',;<>]{8,}|[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+){2,})")
"""A credential's value after its auth scheme or its name: one with a digit ("the token is expired" has none),
any value of eight characters or more given by ``:`` or ``=`` (``token = supersecretvalue``), or one of three
parts or more joined by hyphens or underscores (``my API key is abcd-efgh-ijkl-mnop``)."""
_SPACED = re.compile(r"(?<![\w-])[A-Za-z0-9_+/=-]{1,6}(?: [A-Za-z0-9_+/=-]{1,6}){3,40}(?![\w-])")
"""Short groups parted by single spaces (``AKIA IOSF ODNN 7EXA MPLE``, ``s k - p r o j - …``): a key written
out to slip past a search is found by its groups joined."""
_PREFIXED = re.compile(
    r"(?<![\w-])(?:(?:sk|rk|pk)[-_](?:live|test|proj|ant|svcacct|admin)[-_]|sk-|gh[pousr]_|github_pat_|glpat-"
    r"|xox[abprs]-|hf_|AKIA|ASIA|AIza|SG\.)[A-Za-z0-9_.=-]{12,}|(?<![\w-])(?:AKIA|ASIA)[A-Z0-9]{8,}(?![\w-])"
    # a licence or product key of four groups or more: 7H3F-9XQ2-LM4P-88ZD
    r"|(?<![\w-])(?=[A-Z0-9-]*\d)(?=[A-Z0-9-]*[A-Z])[A-Z0-9]{3,6}(?:-[A-Z0-9]{4,6}){3,}(?![\w-])")
"""A token that begins as a provider's keys begin (``sk-live-``, ``ghp_``, ``AKIA`` …), whatever its entropy: a
key of a made-up or an expired service is still shaped as one, and a key's shape is enough to keep it out."""
_QUICK = re.compile(r"(?i)pass|pwd|secret|token|key|auth|bearer|cred|private|-----|://|[A-Za-z0-9+/=_\-]{20}"
                    r"|\b(?:[srp]k[-_]|gh[pousr]_|github_pat_|hf_|glpat-|xox[abprs]-|AKIA|ASIA|AIza|SG\.)"
                    r"|\b(?:\d{1,3}\.){3}\d{1,3}\b"
                    r"|(?<!\S)\S \S \S \S |\b[A-Za-z0-9]{4,6} [A-Za-z0-9]{4,6} [A-Za-z0-9]{4,6}\b")
"""Text with none of these cannot hold a finding of any plugin: most texts are skipped at once."""


@cache
def _plugins() -> tuple[list[Any], list[Any], Any, re.Pattern[str]]:
    """(the plugins that match a shape, the entropy ones, the keyword one, the
    words the keyword one looks for), built once."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins import keyword
    from detect_secrets.plugins.high_entropy_strings import HighEntropyStringsPlugin

    classes: list[Any] = list(get_mapping_from_secret_type_to_class().values())
    plugins = [cls() for cls in classes]
    words = next(p for p in plugins if isinstance(p, keyword.KeywordDetector))
    plain = [p for p in plugins if not isinstance(p, HighEntropyStringsPlugin | keyword.KeywordDetector)]
    # the keyword plugin is slow and only finds values next to one of its words: it runs where one is
    return (plain, [p for p in plugins if isinstance(p, HighEntropyStringsPlugin)], words,
            re.compile(f"(?i:{'|'.join(keyword.DENYLIST)})"))


def _could_exceed(plugin: Any, value: str) -> bool:
    """Whether ``value`` is long enough for its entropy to pass the plugin's
    limit (a string of n characters has at most log2(n) bits each)."""
    return len(value) >= 8 and len(set(value)) > 2 ** plugin.entropy_limit


def _high_entropy(plugin: Any, value: str) -> bool:
    return (_could_exceed(plugin, value) and bool(plugin.regex.fullmatch(f"'{value}'"))
            and plugin.calculate_shannon_entropy(value) > plugin.entropy_limit)


def secret_spans(text: str) -> list[tuple[int, int]]:
    """The (start, end) of every secret in ``text``, merged and in order."""
    if not _QUICK.search(text):
        return []
    plain, entropy, keywords, words = _plugins()
    spans = [m.span() for m in _PRIVATE_KEY.finditer(text)]
    spans += [m.span(1) for m in _NAMED.finditer(text)]
    spans += [m.span() for m in _PREFIXED.finditer(text)]
    spans += [span for m in _SPACED.finditer(text) for span in _spaced_keys(m)]
    values: set[str] = set()
    for plugin in [*plain, *([keywords] if words.search(text) else [])]:
        values.update(v for v in plugin.analyze_string(text) if v and not _PLACEHOLDER.fullmatch(v))
    for plugin in entropy:  # quoted strings, as the plugins read code
        values.update(v for v in set(plugin.analyze_string(text))
                      if _could_exceed(plugin, v) and plugin.calculate_shannon_entropy(v) > plugin.entropy_limit)
    base64 = [p for p in entropy if p.entropy_limit >= BASE64_LIMIT]
    for match in _LONG_TOKEN.finditer(text):  # and unquoted ones, as a chat holds them (not hex: hashes and trace ids)
        if any(_high_entropy(plugin, match.group(0)) for plugin in base64):
            spans.append((match.start(), match.end()))
    for value in values:
        for found in re.finditer(re.escape(value), text):
            spans.append(_whole_token(text, *found.span()))
    return _merged(spans)


def _spaced_keys(match: re.Match[str]) -> list[tuple[int, int]]:
    """The keys among groups parted by spaces: each run of four groups or more of one size (the last may be
    shorter; a key is cut into equal groups, the words of a sentence are of many sizes) that, joined, is shaped as
    a provider's keys, or is a token of letters and digits with a key's entropy."""
    groups = [(m.start(), m.end()) for m in re.finditer(r"\S+", match.group(0))]
    found, i = [], 0
    while i < len(groups):
        size = groups[i][1] - groups[i][0]
        j = i + 1
        while j < len(groups) and groups[j][1] - groups[j][0] == size:
            j += 1
        end = j + 1 if j < len(groups) and groups[j][1] - groups[j][0] < size else j
        if end - i >= 4:
            joined = "".join(match.group(0)[a:b] for a, b in groups[i:end])
            if _PREFIXED.fullmatch(joined) or (
                    len(joined) >= 20 and re.search(r"\d", joined) and re.search(r"[A-Za-z]", joined)
                    and any(_high_entropy(p, joined) for p in _plugins()[1] if p.entropy_limit >= BASE64_LIMIT)):
                found.append((match.start() + groups[i][0], match.start() + groups[end - 1][1]))
        i = j
    return found


def _whole_token(text: str, start: int, end: int) -> tuple[int, int]:
    """A finding widened to the token it is part of (a value inside a longer token is that token)."""
    if re.fullmatch(rf"[{_TOKEN_CHARS}.~]+", text[start:end]) is None:
        return start, end  # a finding with spaces or quotes in it: as found
    left = start
    while left > 0 and re.match(rf"[{_TOKEN_CHARS}.~]", text[left - 1]):
        left -= 1
    right = end + len(_TOKEN_EDGE.match(text, end).group(0))  # type: ignore[union-attr]
    while right > end and text[right - 1] in ".~":  # a sentence's full stop is not part of the key
        right -= 1
    return left, right


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        else:
            out.append((start, end))
    return out
