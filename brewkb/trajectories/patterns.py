"""The default patterns of personal data in text (``[scrub] patterns`` adds
to them and can turn each off; ``brewkb.trajectories.scrub`` applies them)."""

from __future__ import annotations

__all__ = ["DEFAULT_PATTERNS", "VALIDATORS"]

_AT = r"(?:\s*[(\[{<]\s*(?i:at)\s*[)\]}>]\s*)"
_DOT = r"(?:\s*[(\[{<]\s*(?i:dot)\s*[)\]}>]\s*|\s+(?i:dot)\s+)"
_LOCAL = r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]{1,64}"
"""An e-mail's local part (at most 64 characters), begun where a word begins."""
_NAME_WORD = r"[A-Z][a-zß-öø-ÿ'’]+(?:-[A-Z]?[a-zß-öø-ÿ'’]+)*"
"""A word of a name as people write it: a capital, then lower-case letters (a hyphen may join two)."""
_DIGIT_WORD = r"(?:zero|oh|one|two|three|four|five|six|seven|eight|nine)"
_STREET = (r"Street|St|Avenue|Ave|Road|Rd|Boulevard|Blvd|Lane|Ln|Drive|Dr|Court|Ct|Place|Pl|Way|Terrace|Parkway"
           r"|Pkwy|Highway|Hwy|Square|Sq|Circle|Cir|Trail|Close|Crescent|Row|Alley|Mews|Gardens|Grove|Walk|Rise")
DEFAULT_PATTERNS: dict[str, str] = {
    "passphrase": r"(?i:\b(?:passphrase|pass phrase|secret word|memorable word|security answer|answer to (?:my|the) "
                  r"security question|mother's maiden name|maiden name)\b)(?:\s+(?:is|was))?\s*[:=]?\s+"
                  r"([^\s.;!?\n][^.;!?\n]{2,79})",
    "access_code": r"(?i:\b(?:door|gate|access|entry|alarm|garage|lock|one[- ]time|verification|recovery|backup|sms"
                   r"|2fa|otp|login) (?:codes?|pins?|passcodes?)\b)(?:\s+[a-z]+){0,4}?(?:\s+(?:is|are|was|were))?"
                   r"\s*[:=]?\s*((?=[\w-]*\d)[\w-]{3,}(?:\s*(?:,|and)\s*(?=[\w-]*\d)[\w-]{3,}){0,5})",
    "password": r"(?i:\b(?:password|passcode|passphrase|passwd|pwd|pin(?: code)?)\b)[\"']?\s*(?:(?:is|was|:|=)\s*"
                r"[\"']?([^\s\"',;<]{3,})|((?=[^\s\"',;<]*[^\sA-Za-z\"',;<])[^\s\"',;<]{6,}))",
    "security_code": r"(?i:\b(?:cvv2?|cvc2?|csc|(?:card )?security code|pin(?: code| number)?)\b)"
                     r"(?:\s+(?:is|was))?\s*[:=#]?\s*(\d{3,8})(?![\w-])",
    "birth_date": r"(?i:\b(?:dob|d\.o\.b\.?|date of birth|birth ?date|birthday|born(?: on)?)\b)(?:\s+(?:is|was))?"
                  r"\s*[:=]?\s*(?:the\s+)?(\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|\d{1,2}[-/.]\d{1,2}[-/.]\d{2,4}"
                  r"|(?:\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?)?(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*"
                  r"\.?(?:\s+\d{1,2}(?:st|nd|rd|th)?)?,?\s+\d{4})\b",
    # each part bounded and begun where a word begins: a 200 KB word costs a pass, not its square
    "email": rf"{_LOCAL}@[A-Za-z0-9-]{{1,63}}(?:\.[A-Za-z0-9-]{{1,63}}){{0,8}}\.[A-Za-z]{{2,24}}\b"
             rf"|{_LOCAL}{_AT}[A-Za-z0-9-]{{1,63}}(?:(?:{_DOT}|\.)[A-Za-z0-9-]{{1,63}}){{0,8}}"
             rf"(?:{_DOT}|\.)[A-Za-z]{{2,6}}\b"
             rf"|{_LOCAL}(?:{_DOT}[A-Za-z0-9._%+-]{{1,64}}){{0,4}}\s+(?i:at)\s+[A-Za-z0-9-]{{1,63}}"
             rf"(?:{_DOT}[A-Za-z0-9-]{{1,63}}){{0,8}}{_DOT}[A-Za-z]{{2,6}}\b"
             rf"|{_LOCAL}\s+(?i:at)\s+[a-z0-9-]{{1,63}}(?:\.[a-z0-9-]{{1,63}}){{0,8}}\.[a-z]{{2,6}}\b"
             r"|(?<![\w.%+-])[A-Za-z0-9_%+-]{1,64}(?:\s*\.\s*[A-Za-z0-9_%+-]{1,64}){0,4}\s*@\s*[A-Za-z0-9-]{1,63}"
             r"(?:\s*\.\s*[A-Za-z0-9-]{1,63}){0,8}\s*\.\s*[A-Za-z]{2,24}\b",
    "ssn": r"(?<![\w-])\d{3}-\d{2}-\d{4}(?![\w-])"
           r"|(?i:\b(?:ssn|social security(?: number)?|social)\b)\D{0,20}?(\d{3}[ .-]?\d{2}[ .-]?\d{4})(?!\d)",
    "iban": r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b",
    "card_number": r"(?<![\w-])(?:\d{4}[ .-]){3}\d{1,7}(?![\w-])|(?<![\w-])\d{4}[ .-]\d{6}[ .-]\d{5}(?![\w-])"
                   r"|(?<![\w-])\d{15,16}(?![\w-])",
    "phone": r"(?<![\w-])(?:\+\d{1,3}[ .-]?)?(?:\(\d{3}\)[ .-]?|\d{3}[ .-])(?:\d{3}[ .-]\d{4}|\d{7})(?![\w-])"
             r"|(?<![\w-])\(?0\d{1,4}\)?[ .-]\d{3,4}[ .-]?\d{3,4}(?![\w-])"
             r"|(?i:\b(?:phone|call|cell|mobile|tel|telephone|text|reach|number)\b)\D{0,20}?(?<![\w-])(\d{10,11})(?![\w-])"
             r"|(?<![\w+])(?:\+|00)\d{1,3}(?:[ .-]?\(?\d{1,5}\)?){1,6}(?![\w-])"
             r"|(?<![\w-])\(?0\d{1,4}\)?(?:[ .-]\d{2,4}){3,5}(?![\w-])",  # in pairs: 06 12 34 56 78
    "spelled_number": rf"(?i:\b{_DIGIT_WORD}(?:[\s,.-]+(?:{_DIGIT_WORD}|double|triple)){{6,}}\b)",
    "passport": r"(?i:\bpassport(?:\s+(?:number|no\.?|num|#))?(?:\s+is)?)\s*[:#]?\s*"
                r"((?=[A-Za-z]*\d)[A-Za-z0-9]{6,9})\b",
    "address": rf"\b\d{{1,6}}[A-Za-z]?,?\s+(?:[A-Z][\w'.-]*\s+){{1,4}}(?:{_STREET})\b\.?"
               r"(?:,?\s+(?:Apt|Apartment|Suite|Ste|Unit|Floor)\.?\s*#?\w+)?"
               r"(?:,\s*[A-Z][^\W\d_]+\b(?:[ -][A-Z][^\W\d_]+\b){0,2}){0,2}(?:,?\s+[A-Z]{2}\b)?"
               r"(?:,?\s+(?:\d{5}(?:-\d{4})?|[A-Z]{1,2}\d[A-Z\d]?\s*\d[A-Z]{2})\b)?"
               r"|\b\d{1,5},?\s+(?:rue|avenue|boulevard|chemin|allée|impasse|calle|avenida|via|viale|piazza|rua)"
               r"\s+(?:[\w'-]+\s*){1,4}"
               r"|(?<![\w-])[A-ZÄÖÜ][\wäöüß-]{0,40}(?:straße|strasse|weg|gasse|platz|allee)\s+\d{1,5}[a-z]?\b"
               r"|\b(?i:rue|calle|avenida|viale|piazza|rua|chemin|impasse)\s+(?:[\w'-]+\s+){1,4}?\d{1,5}[a-z]?\b"
               r"(?:,\s*\d{4,5}\b)?",  # the number after the street's name: Calle Mayor 12, 28013
    "payment_id": r"\b(?:credit_card|debit_card|gift_card|certificate|paypal|bank_account|card)_\d{4,}\b",
    "user_id": r"\b[a-z]+_[a-z]+_\d{3,}\b",
    "order_id": r"#[A-Z]?\d{5,}\b",
    "booking_code": r"\b(?:[Rr]eservation|[Bb]ooking|[Cc]onfirmation|[Tt]icket)(?:\s+(?:ID|id|number|code|no\.?))?"
                    r"(?:\s+is)?[\s:#]+((?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{5,10}|[A-Z]{6})\b",
    "name": r"\b(?:[Ii]'m|I am|[Mm]y name is|[Tt]his is|[Yy]ou are|(?i:je m'appelle|je suis|me llamo|mi nombre es"
            r"|mi chiamo|ich heiße|ich heisse|mein name ist|meu nome é|eu sou))"
            r"\s+([A-Z][^\W\d_]+(?:\s+[A-Z][^\W\d_]+)+)"
            r"|(?:^|(?<=[.!?,;:]\s))([A-Z][^\W\d_]+\s+[A-Z][^\W\d_]+)\s+here\b"
            r"|\b(?:Dr|Mr|Mrs|Ms|Mx|Miss|Prof)\.?\s+([A-Z][^\W\d_]+(?:\s+[A-Z][^\W\d_]+){0,2})"
            # a person named after who they are to the conversation: "the duty manager Marcus Webb", "booked under
            # Chen Lee", "travelling with Aiyana Running-Water"
            rf"|\b(?:named|called|under(?: the name(?: of)?)?|customer|passenger|travell?er|manager|agent|supervisor"
            rf"|admin|administrator|representative|officer|clerk|employee"
            rf"|colleague|husband|wife|partner|son|daughter|mother|father|brother|sister|friend|travell?ing with"
            rf"|flying with)\s+({_NAME_WORD}(?:\s+{_NAME_WORD}){{1,2}})\b",
    "zip": r"\b(?:zip|postal)(?:\s+code)?(?:\s+is)?[:\s]+(\d{5})\b",
    "account_number": r"(?i:\b(?:customer|account|member(?:ship)?|loyalty|client|frequent flyer)\s+(?:number|no\.?|num|#|id)"
                      r"(?:\s+is)?)\s*[:#]?\s*((?=[A-Za-z-]*\d)[A-Za-z0-9-]{4,20})\b",
}
"""Placeholder kind → regex. Order matters: earlier patterns win."""


def _iban_ok(text: str) -> bool:
    """The IBAN check: the number read from its four first characters moved to the end is 1 mod 97."""
    code = text.replace(" ", "")
    digits = "".join(str(int(c, 36)) for c in code[4:] + code[:4])
    return int(digits) % 97 == 1


def _phone_ok(text: str) -> bool:
    return 8 <= sum(c.isdigit() for c in text) <= 15


VALIDATORS = {"iban": _iban_ok, "phone": _phone_ok}
"""Kinds whose matches count only when they pass a check (the IBAN's check digits, a phone's length)."""
