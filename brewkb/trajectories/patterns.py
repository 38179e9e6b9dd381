"""The default patterns of personal data in text (``[scrub] patterns`` adds
to them and can turn each off; ``brewkb.trajectories.scrub`` applies them),
and how a personal value a tool named is written elsewhere: a date in other
spellings, a name beside the word next to it."""

from __future__ import annotations

import re
from functools import lru_cache

from brewkb.trajectories.names import PERSON_KEY, begins_with_name, caseless, is_full_name, is_person

__all__ = ["DEFAULT_PATTERNS", "VALIDATORS", "NAME_BESIDE", "whole_name", "date_of", "date_written"]

_AT = r"(?:\s*[(\[{<]\s*(?i:at)\s*[)\]}>]\s*)"
_DOT = r"(?:\s*[(\[{<]\s*(?i:dot)\s*[)\]}>]\s*|\s+(?i:dot)\s+)"
_LOCAL = r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]{1,64}"
"""An e-mail's local part (at most 64 characters), begun where a word begins."""
_NAME_WORD = r"[A-Z][a-zß-öø-ÿ'’]+(?:-[A-Z]?[a-zß-öø-ÿ'’]+)*"
"""A word of a name as people write it: a capital, then lower-case letters (a hyphen may join two)."""
_RELATIVE = (r"husband|wife|partner|spouse|son|daughter|mother|father|mom|mum|dad|brother|sister|grandma|grandpa|aunt"
             r"|uncle|cousin|niece|nephew|roommate|flatmate|neighbou?r|(?:mother|father|son|daughter|brother|sister)-in-law"
             r"|step(?:son|daughter|mother|father|mum|dad)|twins?|carer|caregiver|guardian|godmother|godfather")
"""Relatives and housemates in English: "my son Lukas", "give it to roommate Destiny"."""
_RELATIVE_ELSEWHERE = (r"moglie|marito|figli[oa]|fils|fille|femme|mari|hij[oa]|esposa|esposo|frau|mann|sohn|tochter"
                       r"|abuel[oa]|nonn[oa]|av[óô]|oma|opa")
"""The closest relatives in other languages, as they come after "to" too ("to moglie Giulia")."""
_HEBREW_ARABIC = r"[\u0590-\u05ff\u0600-\u06ff]"
_CASELESS_RUN = rf"{_HEBREW_ARABIC}{{2,}}(?: {_HEBREW_ARABIC}{{2,}}){{1,2}}(?! {_HEBREW_ARABIC})"
"""Two or three words of Hebrew or Arabic letters (scripts without capitals, written with spaces)."""
_CONDITION_WORD = r"(?!(?:and|but|so|because|since|which|who|while)\b)[\w'’-]+"
"""A word of a condition's name: any word up to one that starts another clause."""


def _ends_in(*endings: str) -> str:
    """A regex that holds where the text before ends in one of ``endings`` (one look behind each: they are
    checked once, where a word ends, which keeps a long list fast)."""
    return "(?:" + "|".join(f"(?<={ending})" for ending in endings) + ")"


_NOT_DIAGNOSIS = ("gnosis", "hypnosis", "hipnosis", "osmosis", "symbiosis", "simbiosis", "morphosis", "morfosis",
                  "theosis", "teosis", "apoptosis", "mitosis", "meiosis", "cytosis", "geonosis", "kuwaitis", "graffitis",
                  "grafitis", "politis", "comitis", "buritis", "rhabditis", "cademia", "bohemia", "boemia", "epidemia",
                  "pandemia", "premia", "tremia", "blasfemia", "euphemia", "eufemia", "geremia", "jeremia", "nehemia")
"""Common words with the endings of medical names."""
# a part of the body after a word that says it is injured: "a broken femur", "broke my wrist"
_PART = (r"(?:arm|leg|wrist|ankle|hip|femur|knee|shoulder|elbow|collarbone|rib|neck|foot|pelvis|spine|jaw|toe|finger"
         r"|acl|achilles|meniscus|ligament|tendon)")
_BODY = rf"(?:(?:my|his|her|their|a) )?(?:left |right )?{_PART}s?"
_DIAGNOSIS = (r"(?i:a(?:sthma\w*|utis[mt]\w*|lzheimer\S*|pno?ea|ddictions?|lcoholism|norexi\w*)|b(?:ipolar|ulimi\w*"
              r"|roken? " + _BODY + r")|c(?:ancer|o?eliac|rohn\S*|erebral palsy|hemo(?:therapy)?|oncussion)"
              r"|d(?:iabet\w*|ementia|ys(?:lexi|praxi)\w*|ialysis|epressive|islocated " + _BODY + r")|e(?:pilep\w*"
              r"|mbarazada|nceinte)|fractured " + _BODY + r"|g(?:luten intoleran\w*|r[áa]vida)|(?:hypo|hyper)thyroidism"
              r"|in(?:fertil\w*|jured " + _BODY + r"|sulin pump|cinta)|l(?:upus|ymphoma|actose intoleran\w*)"
              r"|m(?:elanoma|iscarri\w*|arcapasos)|p(?:arkinson\S*|regnan(?:t|cy|cies)|acemaker|sychotic)"
              r"|s(?:chizophreni\w*|leep apno?ea|prained " + _BODY + r")|t(?:umou?rs?|or[en] " + _BODY + r")"
              r"|(?:carcin|sarc|glauc|hemat|haemat|myel|mening|gli|aden|fibr|neur)oma|herzschrittmacher|(?:sch|z)wanger"
              r"|беременна|eczema|emphysema|o?edema|(?:fibro|neur)?myalgia|neuralgia|(?:eating|panic|anxiety|personality"
              r"|seizure|mood|obsessive[- ]compulsive|substance use) disorders?)|(?:HIV|AIDS|ADHD|PTSD|COPD|IVF|PrEP)\b"
              r"|(?<![\w-])[A-Za-z]{4,}+(?![\w-])"
              + _ends_in("itis", "osis", "emia", "plegia", "plegic", "phrenia", "phrenic")
              + "".join(f"(?<!(?i:{word}))" for word in _NOT_DIAGNOSIS))
"""The name of a diagnosis, said of someone whatever the words around it ("I have epilepsy", "the letter confirms
epilepsy", "reports a broken femur"): common conditions and injuries (grouped by their first letter, which keeps
the pattern fast), and the endings of medical names (arthritis, fibrosis, anaemia, paraplegic) but for the common
words that end so (diagnosis, metamorphosis, Kuwaitis, academia)."""
_DRUG_STEMS = ("pril", "sartan", "olol", "dipine", "statin", "gliptin", "gliflozin", "glutide", "formin", "prazole",
               "itidine", "otidine", "etidine", "oxetine", "traline", "triptyline", "azepam", "azolam", "iapine",
               "zapine", "peridone", "ipramine", "nazole", "dazole", "mycin", "cillin", "cycline", "oxacin", "clovir",
               "fovir", "mivir", "navir", "buvir", "mab", "tinib", "parin", "docaine", "vacaine", "codone", "morphone", "orphine", "hadone", "profen", "coxib",
               "nisone", "sisone", "thasone", "isolone", "inolone", "drolone", "sterone", "adiol", "thyroxine", "trigine",
               "phenidate", "amfetamine", "amphetamine", "triptan", "lukast", "setron", "dronate", "zosin", "buterol",
               "moterol", "tropium", "afil", "gabalin", "apentin", "atadine", "amadol", "oxone", "fentanyl", "metacin",
               "fenac", "semide", "thiazide", "barbital")
"""Endings of medicines' international names (WHO INN stems: lisinopril, sertraline, quetiapine, semaglutide)."""
_CONDITION = (r"(?i:blind|deaf|disabled|disability|disabilities|wheelchair|crutches|depression|anxiety|stroke(?! of)"
              r"|heart (?:attack|condition|disease)|(?:medical|health|mental health|chronic) (?:condition|issue)s?"
              r"|allerg(?:y|ies)|migraines?|insomnia|(?:long )?covid(?:-19)?|visually impaired|hard of hearing"
              r"|partially sighted|(?:[a-z]+ ){1,2}?(?:disease|disorder|syndrome))")
"""A condition of someone, when it is said of a person: "I'm blind", "my son has a heart condition"."""
_DISCLOSED = (r"(?i:\bI(?:'m| am|'ve got| have| had|'ve had| use| suffer from| live with)|\b(?:he|she)(?:'s| is| has| had"
              r"| uses)|\bwho (?:is|has|had|uses)|\b(?:my|our) (?:[a-z]+ ){0,1}?(?:" + _RELATIVE +
              r"|friend|child|kid|baby|boy|girl)(?:'s| is| has| had| uses)|\b(?:reports|reported|registered|legally"
              r"|partially))")
_DIGIT_WORD = r"(?:zero|oh|one|two|three|four|five|six|seven|eight|nine)"
_STREET = (r"Street|St|Avenue|Ave|Road|Rd|Boulevard|Blvd|Lane|Ln|Drive|Dr|Court|Ct|Place|Pl|Way|Terrace|Parkway"
           r"|Pkwy|Highway|Hwy|Square|Sq|Circle|Cir|Trail|Close|Crescent|Row|Alley|Mews|Gardens|Grove|Walk|Rise")
DEFAULT_PATTERNS: dict[str, str] = {
    "passphrase": r"(?i:\b(?:passphrase|pass phrase|secret (?:word|phrase)|seed phrase|recovery phrase|mnemonic"
                  r"|memorable word|security answer|answer to (?:my|the) "
                  r"security question|mother's maiden name|maiden name)\b)(?:\s+(?:is|was))?\s*[:=]?\s+"
                  r"((?!(?:is|was)\s)[^\s.;!?\n][^.;!?\n]{2,79})",
    "access_code": r"(?i:\b(?:door|gate|access|entry|alarm|garage|lock|one[- ]time|verification|recovery|backup|sms"
                   r"|2fa|otp|login) (?:codes?|pins?|passcodes?)\b)(?:\s+[a-z]+){0,4}?(?:\s+(?:is|are|was|were))?"
                   r"\s*[:=]?\s*((?=[\w-]*\d)[\w-]{3,}(?:\s*(?:,|and)\s*(?=[\w-]*\d)[\w-]{3,}){0,5})",
    "password": r"(?i:(?:\b(?:password|passcode|passphrase|passwd|pwd|pw|pin(?: code)?|basic auth|mot de passe|passwort"
                r"|contraseña|senha|пароль)\b|密码|パスワード|비밀번호))[\"']?\s*(?:(?:(?:is|was|ist|es|est|é|是|は)\s*[:=]?|:|=|：)\s*"
                r"[\"']?(?!(?i:not|no|wrong|incorrect|invalid|expired|correct|right|the|my|same|too|still|also|being"
                r"|working|accepted|changed|blocked|locked|missing|required|reset)\b)([^\s\"',;<]{3,})"
                r"|((?=[^\s\"',;<]*[^\sA-Za-z\"',;<])[^\s\"',;<]{6,}))",
    "security_code": r"(?i:\b(?:cvv2?|cvc2?|csc|(?:card )?security code|pin(?: code| number)?|otp|one[- ]time (?:code|pin)"
                     r"|code (?:they|you|that was) (?:texted|sent|emailed)(?: (?:to )?me)?)\b)(?:'s|’s)?(?:\s+(?:is|was))?"
                     r"\s*[:=#]?\s*(\d{3}\s\d{3}|\d(?: \d){3,7}|\d{3,8})(?![\w-])",
    "birth_date": r"(?i:\b(?:dob|d\.o\.b\.?|date of birth|birth ?date|birthday|born(?: on)?|geburtsdatum|geboren(?: am)?"
                  r"|fecha de nacimiento|nacid[oa](?: el)?|date de naissance|née? le|data di nascita|nat[oa] il"
                  r"|data de nascimento|nascid[oa] em)(?!\w))(?:'s|’s)?(?:\s+(?:is|was|ist|es|est|è|é))?"
                  r"\s*[:=]?\s*(?:the\s+)?(\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|\d{1,2}[-/.]\d{1,2}[-/.]\d{2,4}"
                  r"|\d{1,2}[-/. ](?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?[-/. ]\d{2,4}"
                  r"|(?:\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?)?(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*"
                  r"\.?(?:\s+\d{1,2}(?:st|nd|rd|th)?)?,?\s+(?:\d{4}|['’]\d{2}))(?![\w-])",
    # a user name and its password before a host: admin:hunter2@db
    "credentials": r"(?<![\w.+-])[A-Za-z][\w.+-]{0,63}:[^\s@:/]{1,128}@[\w.-]{1,253}",
    # each part bounded and begun where a word begins: a 200 KB word costs a pass, not its square
    "email": rf"{_LOCAL}@[A-Za-z0-9-]{{1,63}}(?:\.[A-Za-z0-9-]{{1,63}}){{0,8}}\.[A-Za-z]{{2,24}}\b"
             rf"|{_LOCAL}{_AT}[A-Za-z0-9-]{{1,63}}(?:(?:{_DOT}|\.)[A-Za-z0-9-]{{1,63}}){{0,8}}"
             rf"(?:{_DOT}|\.)[A-Za-z]{{2,6}}\b"
             rf"|{_LOCAL}(?:{_DOT}[A-Za-z0-9._%+-]{{1,64}}){{0,4}}\s+(?i:at)\s+[A-Za-z0-9-]{{1,63}}"
             rf"(?:{_DOT}[A-Za-z0-9-]{{1,63}}){{0,8}}{_DOT}[A-Za-z]{{2,6}}\b"
             rf"|{_LOCAL}\s+(?i:at)\s+[a-z0-9-]{{1,63}}(?:\.[a-z0-9-]{{1,63}}){{0,8}}\.[a-z]{{2,6}}\b"
             r"|(?<![\w.%+-])[A-Za-z0-9_%+-]{1,64}(?:\s*\.\s*[A-Za-z0-9_%+-]{1,64}){0,4}\s*@\s*[A-Za-z0-9-]{1,63}"
             r"(?:\s*\.\s*[A-Za-z0-9-]{1,63}){0,8}\s*\.\s*[A-Za-z]{2,24}\b"
             # a host without its ending (name@gmail), or in letters of any script (name@müller.de)
             rf"|{_LOCAL}@[^\W_][\w-]{{0,62}}(?:\.[^\W_][\w-]{{0,62}}){{0,8}}(?![\w@])",
    "ssn": r"(?<![\w-])\d{3}-\d{2}-\d{4}(?![\w-])"
           r"|(?i:\b(?:ssn|social security(?: number)?|social)\b)\D{0,20}?(\d{3}[ .-]?\d{2}[ .-]?\d{4})(?!\d)",
    "iban": r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b",
    "card_number": r"(?<![\w-])(?:\d{4}[ .-]){3}\d{1,7}(?![\w-])|(?<![\w-])\d{4}[ .-]\d{6}[ .-]\d{5}(?![\w-])"
                   r"|(?<![\w-])\d{15,16}(?![\w-])",
    # a card's expiry, given as one: "expires 04/27", "exp. 04/2027", "valid thru 11/26"
    "card_expiry": r"(?i:\b(?:exp(?:ires|iry|iration)?(?: date)?|valid (?:thru|through|until))\.?:?\s*(?:on\s+|is\s+)?)"
                   r"(\d{1,2}\s?/\s?(?:\d{4}|\d{2}))(?![\w/])",
    "phone": r"(?<![\w-])(?:\+\d{1,3}[ .-]?)?(?:\(\d{3}\)[ .-]?|\d{3}[ .-])(?:\d{3}[ .-]\d{4}|\d{7})(?![\w-])"
             r"|(?<![\w-])\(?0\d{1,4}\)?[ .-]\d{3,4}[ .-]?\d{3,4}(?![\w-])"
             r"|(?i:\b(?:phone|call|cell|mobile|tel|telephone|text|reach|number)\b)\D{0,20}?(?<![\w-])(\d{10,11})(?![\w-])"
             r"|(?<![\w+])(?:\+|00)\d{1,3}(?:[ .-]?\(?\d{1,5}\)?){1,6}(?![\w-])"
             r"|(?<![\w-])\(?0\d{1,4}\)?(?:[ .-]\d{2,4}){3,5}(?![\w-])",  # in pairs: 06 12 34 56 78
    "spelled_number": rf"(?i:\b{_DIGIT_WORD}(?:[\s,.-]+(?:{_DIGIT_WORD}|double|triple)){{6,}}\b)",
    "passport": r"(?i:\b(?:passport|reisepass|passeport|pasaporte|passaporto)(?:\s*(?:number|nummer|no\.?|num|#))?"
                r"(?:'s|’s)?(?:\s+is)?)\s*[:#]?\s*"
                r"((?=[A-Za-z]*\d)[A-Za-z0-9]{6,9})\b",
    "address": rf"\b\d{{1,6}}[A-Za-z]?,?\s+(?:[A-Z][\w'.-]*\s+){{1,4}}(?:{_STREET})\b\.?"
               r"(?:,?\s+(?:Apt|Apartment|Suite|Ste|Unit|Floor)\.?\s*#?\w+)?"
               r"(?:,\s*[A-Z][^\W\d_]+\b(?:[ -][A-Z][^\W\d_]+\b){0,2}){0,2}(?:,?\s+[A-Z]{2}\b)?"
               r"(?:,?\s+(?:\d{5}(?:-\d{4})?|[A-Z]{1,2}\d[A-Z\d]?\s*\d[A-Z]{2})\b)?"
               r"|\b\d{1,5},?\s+(?:rue|avenue|boulevard|chemin|allée|impasse|calle|avenida|via|viale|piazza|rua)"
               r"\s+(?:[\w'-]+\s*){1,4}"
               r"|(?<![\w-])[A-ZÄÖÜ][\wäöüß-]{0,40}(?:straße|strasse|weg|gasse|platz|allee)\s+\d{1,5}[a-z]?\b"
               r"|\b(?i:rue|calle|avenida|viale|piazza|rua|chemin|impasse)\s+(?:[\w'-]+\s+){1,4}?\d{1,5}[a-z]?\b"
               r"(?:,\s*\d{4,5}\b)?"  # the number after the street's name: Calle Mayor 12, 28013
               # a house number and a street of any name, then its city, state and ZIP: 1600 Broadway, New York, NY 10019
               r"|\b\d{1,6}[A-Za-z]?\s+[A-Z][\w'.-]{0,40}(?:\s[A-Z][\w'.-]{0,40}){0,3},\s*(?:[A-Z][^\W\d_]{0,40}"
               r"(?:\s[A-Z][^\W\d_]{0,40}){0,2}|<[a-z_]+>),?\s*[A-Z]{2}\s+\d{5}(?:-\d{4})?\b"
               # a street of any name before its number, then a postcode and a city: Keizersgracht 123, 1015 CJ Amsterdam
               r"|(?<![\w-])[A-ZÄÖÜ][\w'.äöüß-]{2,40}\s+\d{1,5}[a-z]?,\s*\d{4,5}(?:\s?[A-Z]{2})?\s+[A-Z][^\W\d_]+"
               # Chinese and Japanese: a place name run on into its block and house numbers (六本木6-10-1)
               r"|[\u3040-\u30ff\u4e00-\u9fff]{2,40}\d{1,4}(?:[-−－ー丁目番地号]{1,2}\d{1,4}){1,3}",
    "payment_id": r"\b(?:credit_card|debit_card|gift_card|certificate|paypal|bank_account|card)_\d{4,}\b",
    "user_id": r"\b[a-z]+_[a-z]+_\d{3,}\b",
    "order_id": r"#[A-Z]?\d{5,}\b",
    "booking_code": r"\b(?:[Rr]eservation|[Bb]ooking|[Cc]onfirmation|[Tt]icket)(?:\s+(?:ID|id|number|code|no\.?))?"
                    r"(?:\s+is)?[\s:#]+((?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{5,10}|[A-Z]{6})\b",
    "name": r"\b(?:[Ii]'m|I am|[Mm]y name is|[Tt]his is|[Yy]ou are|[Ii]t'?s|[Ii]t is|(?i:je m'appelle|je suis|me llamo|mi nombre es"
            r"|mi chiamo|ich heiße|ich heisse|mein name ist|meu nome é|eu sou|nazywam się|меня зовут|mijn naam is"
            r"|jag heter|benim adım|mă numesc|με λένε))"
            r"\s+([A-ZА-ЯЁΑ-Ω][^\W\d_]+(?:-[A-ZА-ЯЁΑ-Ω]?[^\W\d_]+)?(?:\s+(?:(?:de|van|der|von|da|di|le|la)\s+)?"
            r"[A-ZА-ЯЁΑ-Ω][^\W\d_]+(?:-[A-ZА-ЯЁΑ-Ω]?[^\W\d_]+)?)+)"
            r"|(?:我叫|我的名字是|私の名前は|わたしの名前は|제 이름은)\s*([\u4e00-\u9fff\u3040-\u30ff\uac00-\ud7af]{2,6})"
            # a name said in other scripts: "安藤です、…と申します", "안녕하세요, 김민준입니다", "ผมชื่อสมชาย", "मेरा नाम … है"
            r"|([\u4e00-\u9fff\u3040-\u30ff]{2,6})(?:と申します|といいます|と言います)"
            r"|(?:^|(?<=[。.!！?？\s]))([\u4e00-\u9fff]{2,4})です(?=[。.、,!！?？\s]|$)"
            r"|(?:저는|안녕하세요[,.]?)\s*([\uac00-\ud7a3]{2,4})(?:입니다|이에요|예요|(?:이)?라고 합니다)"
            r"|(?:ผม|ฉัน|ดิฉัน|หนู)ชื่อ\s*([\u0e00-\u0e7f]{2,20})|मेरा नाम\s+([\u0900-\u097f]+(?:\s+[\u0900-\u097f]+)?)\s+है"
            r"|اسمي\s+([\u0600-\u06ff]{2,}(?:\s+[\u0600-\u06ff]{2,})?)|(?:שמי|קוראים לי)\s+([\u0590-\u05ff]{2,}(?:\s+"
            r"[\u0590-\u05ff]{2,})?)|(?:Իմ անունը|Անունս)\s+([\u0530-\u058f]{2,}(?:\s+[\u0530-\u058f]{2,})?)"
            r"|ჩემი სახელია\s+([\u10a0-\u10ff]{2,}(?:\s+[\u10a0-\u10ff]{2,})?)"
            # a name said before "here" or "speaking": "Jane Doe here", "Hey - Sione Taufa speaking"
            r"|(?:^|(?<=[.!?,;:-]\s))([A-Z][^\W\d_]+\s+[A-Z][^\W\d_]+)\s+(?:here|speaking)\b"
            # a name given as a label's value ("Name: Jane Doe", "name's Jane Doe") or under a sign-off
            rf"|(?i:\bname)(?:\s*:|'s|’s|\s+is)\s+({_NAME_WORD}(?:\s+{_NAME_WORD}){{1,2}})\b"
            rf"|(?i:\b(?:patient|customer|client|member|guest|caller|passenger|holder))\s*:\s+"
            rf"({_NAME_WORD}(?:\s+{_NAME_WORD}){{1,2}})\b"
            rf"|(?:^|(?<=[.!?\n]\s)|(?<=\n))(?:Regards|Best regards|Kind regards|Warm regards|Best|Cheers|Thanks"
            rf"|Thank you|Many thanks|Sincerely|Yours(?: truly| sincerely)?)\s*[,:—–-]?\s+"
            rf"({_NAME_WORD}(?:\s+{_NAME_WORD}){{1,2}})\s*[.!]?\s*$"
            r"|\b(?:Dr|Mr|Mrs|Ms|Mx|Miss|Prof)\.?\s+([A-Z][^\W\d_]+(?:\s+[A-Z][^\W\d_]+){0,2})"
            # a person named after who they are to the conversation: "the duty manager Marcus Webb", "booked under
            # Chen Lee", "travelling with Aiyana Running-Water"
            rf"|\b(?:named|called|(?:signed|approved|written|sent|referred|treated|seen|examined|reported|driven) by"
            rf"|under(?: the name(?: of)?)?|customer|passenger|travell?er|manager|agent|supervisor"
            rf"|admin|administrator|representative|officer|clerk|employee"
            rf"|colleague|husband|wife|partner|son|daughter|mother|father|brother|sister|friend|travell?ing with"
            rf"|flying with)\s+({_NAME_WORD}(?:\s+{_NAME_WORD}){{1,2}})\b"
            # one word is enough after "my" and a relative: "my son Lukas", "My dad Finn"
            rf"|\b(?i:my|our|his|her|their)\s+(?:{_RELATIVE}|friend|colleague|coworker|boss|fianc[eé]e?|boyfriend"
            rf"|girlfriend|grandmother|grandfather|grandson|granddaughter|child|kid|baby)"
            rf"\s+({_NAME_WORD}(?:\s+{_NAME_WORD}){{0,2}}(?:,?\s+(?:and|&)\s+{_NAME_WORD})?)\b"
            # the same in other languages: "meine Frau Heike", "mi hijo Santiago", "ma fille Chloé"
            rf"|\b(?i:mein(?:e|em|en|er)?|unser(?:e|em|en)?|mon|ma|mes|notre|mi|mis|nuestr[oa]s?|mio|mia|mía|mío"
            rf"|meu|minha|mijn|onze|moja|mój|moj[ae]|мо[йяеи])\s+(?i:{_RELATIVE_ELSEWHERE}|ehemann|ehefrau|mutter|vater"
            rf"|bruder|schwester|freund(?:in)?|kollegen?|kollegin|mère|père|frère|s(?:œ|oe)ur|amie?|collègue"
            rf"|grand-mère|grand-père|marido|mujer|madre|padre|herman[oa]|amig[oa]|fratello|sorella"
            rf"|filh[oa]|mãe|pai|irmão|irmã|vrouw|zoon|dochter|moeder|vader|broer|zus|żona|mąż|syn|córka|brat"
            rf"|siostra|жена|муж|сын|дочь|мама|папа|брат|сестра)\s+({_NAME_WORD}(?:\s+{_NAME_WORD}){{0,2}})\b"
            # a relative after "to", "for" or "with", their name next: "give it to son Haruto", "to moglie Giulia"
            rf"|\b(?i:to|for|with|from)\s+(?i:{_RELATIVE}|{_RELATIVE_ELSEWHERE})\s+({_NAME_WORD})\b",
    # capitalised words, two of them in a row a given name and then a given name or a surname (``names``)
    "full_name": r"(?<![\w'’-])(?=[A-ZÀ-ÞА-ЯЁΑ-Ω])[^\W\d_]{2,}(?:-[^\W\d_]{2,})?"
                 r"(?: (?=[A-ZÀ-ÞА-ЯЁΑ-Ω])[^\W\d_]{2,}(?:-[^\W\d_]{2,})?){1,3}(?![\w-])"
                 # two or three words of Arabic or Hebrew letters between words of Latin ones: "Claim <claim_id>:
                 # طارق حداد will drop the car off" (a text in those scripts is left as it is)
                 rf"|(?:(?<=[A-Za-z>] )|(?<=[A-Za-z>][,:;] )){_CASELESS_RUN}(?=(?:['’]s)?[,.;:!?)]?(?:\s|$))"
                 rf"|(?<!\S){_CASELESS_RUN}(?=(?:['’]s)?,? [A-Za-z<])",
    # a health condition said as one: "diagnosed with …", "recovering from …", "in hospital with …"; what else
    # one recovers from ("an outage") goes with it: a condition kept is worse than a word lost
    "health": rf"(?i:\b(?:diagnosed with|suffer(?:s|ing)? from|recover(?:s|ing|ed)? from|(?:being )?treated for"
              rf"|treatment for|(?:in|to) hospital (?:with|for)|hospitali[sz]ed (?:with|for)|allergic to|medical history of"
              rf"|surgery (?:on|for)|a case of|tested positive for)\s+)({_CONDITION_WORD}(?:\s{_CONDITION_WORD}){{0,4}})"
              # a condition in capitals said positive: "I'm HIV positive", "COVID-positive"
              r"|\b[A-Z][A-Z0-9]{1,9}(?:-\d{1,2})?[- ]positive\b"
              # a diagnosis, wherever it is named: "I have epilepsy so I can't drive a manual"
              rf"|(?<![\w-])(?:(?i:type [12i]+) )?(?:{_DIAGNOSIS})(?:['’]s)?(?:(?i: disease| syndrome| disorder)\b)?(?![\w-])"
              # an injured part of someone's body: "until my ankle heals", "my wrist is broken"
              rf"|(?i:\b(?:my|his|her|their) (?:left |right )?{_PART}s? (?:heals|has healed|is healing|is (?:broken"
              r"|fractured|sprained|injured|in a cast)))\b"
              # a condition said of a person: "I'm registered blind", "my son has a heart condition", "I use a
              # wheelchair"
              rf"|{_DISCLOSED}\s+(?:(?i:a|an|some|mild|severe|chronic|bad|terrible|really|quite|very)\s+){{0,2}}"
              rf"({_CONDITION})(?![\w-])",
    # a medicine, by the ending of its international name ("I'm on sertraline"), by a few names without one, and a
    # name after words that say it is a medicine ("a refill of my Truvada", "my doctor switched me off Lipitor")
    "medication": r"(?<![\w-])[A-Za-z]{6,}+(?![\w-])" + _ends_in(*_DRUG_STEMS) +
                  r"|(?<![\w-])(?i:insulin(?: [a-z]+ine)?|aspirin|paracetamol|acetaminophen|warfarin)\b"
                  r"|(?i:\b(?:refills? (?:of|for|on)|prescriptions? (?:of|for)|prescribed|switched (?:me )?(?:off|to|from))"
                  r"\s+(?:(?:my|his|her|their|the|some|more) )?)([A-Z][a-z]+(?:-[A-Z]?[a-z]+)?)\b",
    "zip": r"(?i:\b(?:zip|postal|post ?code|eircode|plz|código postal|code postal)(?:\s+code)?(?:\s+is)?)[:\s]+"
           r"((?=[A-Z0-9 -]{0,9}\d)[A-Z0-9]{2,5}(?:[ -][A-Z0-9]{3,4})?)(?![\w-])"
           # a British postcode on its own: LS1 4AP, SW1A 1AA
           r"|\b[A-Z]{1,2}\d[A-Z\d]? \d[A-Z]{2}\b",
    "login": r"(?i:\b(?:login|log-in|username|user name|userid|handle)\b)(?:\s*[:=]\s*|\s+(?:is|was)\s+)"
             r"((?!(?:is|was)\b)[^\s,;:<>\"']{1,63}[^\s,;:<>\"'.!?](?:\s*/\s*[^\s,;<>\"']{1,63}[^\s,;<>\"'.!?])?)",
    "mac_address": r"(?<![\w:-])[0-9A-Fa-f]{2}(?:[:-][0-9A-Fa-f]{2}){5}(?![\w:-])",
    "ip_address": r"(?<![\w.:])(?:\d{1,3}\.){3}\d{1,3}(?![\w.])"
                  r"|(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){5,7}[0-9A-Fa-f]{1,4}(?![\w:])"
                  r"|(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){2,6}:(?:[0-9A-Fa-f]{1,4}(?::[0-9A-Fa-f]{1,4}){0,5})?(?![\w:])",
    "wallet": r"\b0x[0-9a-fA-F]{40}\b|\bbc1[ac-hj-np-z02-9]{20,80}\b|\b[13][a-km-zA-HJ-NP-Z1-9]{25,34}\b",
    "location": r"(?<![\w.])-?\d{1,3}\.\d{3,}°?\s*[NS]?\s*,\s*-?\d{1,3}\.\d{3,}°?\s*[EW]?(?![\w.])",
    "account_number": r"(?i:\b(?:customer|account|member(?:ship)?|loyalty|client|frequent flyer)\s+(?:number|no\.?|num|#|id)"
                      r"(?:\s+is)?)\s*[:#]?\s*((?=[A-Za-z-]*\d)[A-Za-z0-9-]{4,20})\b",
    # a whole date with its year, as people write one (a birth date is given so, often without saying what it is);
    # not the machine form 2024-05-17 of tools' arguments
    "date": r"(?i:\b(?:(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+\d{1,2}(?:st|nd|rd|th)?,?\s+"
            r"|\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?,?\s+"
            r"|\d{1,2}-(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*-)"
            r"(?:(?:1[89]|20)\d{2}|['’]\d{2})\b(?![-/.]\d))"
            r"|(?<![\w./-])\d{1,2}[/.-]\d{1,2}[/.-](?:1[89]|20)\d{2}(?![\w/-])",
    # seven to nineteen digits, written together or in groups (a national id, an account, a phone said otherwise);
    # not a date, nor a longer run (a trace id, a hash)
    "number": r"(?<![\w.,/-])(?!\d{4}[-/.]\d{1,2}[-/.]\d{1,2}(?![\d]))(?!\d{1,2}[-/.]\d{1,2}[-/.]\d{2,4}(?!\d))"
              r"\d(?:[ ./-]?\d){6,18}(?![\w-])",
    # a number plate of a shape no other text has: British (AB12 CDE), Indian (MH 65 FU 9414), Japanese
    # (品川 330 あ 12-34), Korean (29가 7978)
    "plate": r"\b[A-Z]{2}\d{2} [A-Z]{3}\b|\b[A-Z]{2}[ -]?\d{1,2}[ -]?[A-Z]{1,3}[ -]?\d{4}\b"
             r"|[\u4e00-\u9fff]{1,4}\s?\d{2,3}\s?[\u3040-\u309f]\s?\d{1,2}-\d{2}(?!\d)"
             r"|(?<!\d)\d{2,3}[\uac00-\ud7a3] ?\d{4}(?!\d)",
    # a value given as an id or a number of any kind: "my employee id is E555123", "tax id 12-3456789", written
    # whole or in groups of capitals and digits ("QQ 12 34 56 C", a plate "KA 01 AB 1234")
    "id": r"(?i:\b(?:id|ids|identifier|number|nummer|numéro|número|numero|no\.|num|licen[cs]e(?: plate)?|plate"
          r"|registration|reg|vin|dni|nie|nif|cpf|curp|pesel|bsn|aadhaar|nino|personnummer|codice fiscale)\b)"
          r"(?:\s+(?:is|was|are))?\s*[:#]?\s*"
          r"((?=[A-Z ]{0,20}\d)[A-Z0-9]{1,4}(?: [A-Z0-9]{1,4}){1,5}(?![\w-])"
          r"|(?=[A-Za-z-]*\d)[A-Za-z0-9][A-Za-z0-9-]{3,29}(?![\w-]))",
}
"""Placeholder kind → regex. Order matters: earlier patterns win."""


def _iban_ok(text: str, whole: str = "") -> bool:
    """The IBAN check: the number read from its four first characters moved to the end is 1 mod 97."""
    code = text.replace(" ", "")
    digits = "".join(str(int(c, 36)) for c in code[4:] + code[:4])
    return int(digits) % 97 == 1


def _phone_ok(text: str, whole: str = "") -> bool:
    return 8 <= sum(c.isdigit() for c in text) <= 15


_SAYS_NAME = re.compile(r"(?i:\bnamed?\b|\bname's|nome|nombre|зовут|heiße|heisse|appelle|llamo|chiamo|nazywam|naam"
                        r"|heter|adım|numesc|λένε|անուն)|名|叫|이름|სახელ")
"""Words that say a name follows ("my name is", "named", "Меня зовут", "我叫"): a name so given is one, known or not
(a name in a script without capitals needs none: ``_name_ok``)."""


def _name_ok(text: str, whole: str = "") -> bool:
    """A name found by the words around it: one said to be a name, one a word of which is a person's name, or one
    of a script without capitals (``Regards, Travel Desk`` and ``It's Unlimited Plus`` are none); said only with
    "です", one that begins with a person's name (``佐藤花子です``, not ``予約です``)."""
    if whole.endswith("です"):
        return begins_with_name(text)
    return _SAYS_NAME.search(whole) is not None or is_person(text) or caseless(text)


def _full_name_ok(text: str, whole: str = "") -> bool:
    return is_full_name(text) or caseless(text)


VALIDATORS = {"iban": _iban_ok, "phone": _phone_ok, "name": _name_ok, "full_name": _full_name_ok}
"""Kinds whose matches count only when they pass a check of the value and the whole match (the IBAN's check
digits, a phone's length, a name's words among people's names or said to be a name)."""


MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december")


@lru_cache(maxsize=65536)
def date_of(value: str) -> tuple[int, int, int] | None:
    """The year, month and day of a value written as a date (``1968-07-15``, ``07/15/1968``), or ``None``."""
    iso = re.fullmatch(r"(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})", value)
    us = re.fullmatch(r"(\d{1,2})/(\d{1,2})/(\d{4})", value)
    year, month, day = (int(iso[1]), int(iso[2]), int(iso[3])) if iso else \
        (int(us[3]), int(us[1]), int(us[2])) if us else (0, 0, 0)
    return (year, month, day) if 1 <= month <= 12 and 1 <= day <= 31 else None


def date_written(date: tuple[int, int, int]) -> str:
    """A regex of a date in the ways people write it: ``July 15, 1968``, ``15th of Jul 1968``, ``07/15/1968``,
    ``15.07.1968``, ``1968/07/15``."""
    year, month, day = date
    name = MONTHS[month - 1]
    words = rf"(?:{name}|{name[:3]}\.?)"
    days = rf"0?{day}(?:st|nd|rd|th)?"
    numbers = rf"0?{month}[/.-]0?{day}[/.-]{year}|0?{day}[/.-]0?{month}[/.-]{year}|{year}[/.-]0?{month}[/.-]0?{day}"
    return rf"(?i:{words}\s+{days},?\s+{year}|{days}\s+(?:of\s+)?{words},?\s+{year}|{numbers})"


_PLAIN_NAME_WORD = r"[A-Z][a-zß-öø-ÿ]+(?:-[A-Z]?[a-zß-öø-ÿ]+)*"
NAME_BESIDE = re.compile(rf"\b{_PLAIN_NAME_WORD}\s+<([a-z_]+)>|<([a-z_]+)>\s+{_PLAIN_NAME_WORD}\b(?!\s*<)")
"""A capitalised word of letters (not ``I'm``) next to a placeholder."""


def whole_name(match: re.Match[str]) -> str:
    """A name placeholder with the capitalised word beside it (``Viktor <last_name>``, ``<first_name> Castillo``:
    a middle name, or a name written in a form the tool did not give) taken into it; other placeholders as found."""
    kind = match.group(1) or match.group(2)
    person = kind.endswith("name") or PERSON_KEY.search(kind) is not None
    return f"<{kind}>" if person else match.group(0)
