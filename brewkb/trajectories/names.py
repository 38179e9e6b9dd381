"""People's names: whether words are a person's name, by Faker's person
providers (given names and surnames of about eighty locales, in their own
scripts), and whether a tool's value is one (``person_named``).

Why a library: a name said with no word around it that says so ("upgrade
Noah Hernandez to business") is told only by knowing names, and Faker keeps
lists of tens of thousands of them per script, maintained by its locales'
speakers. Nothing is generated: only the lists are read, once, when a text
first needs them.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterator
from functools import cache, lru_cache
from typing import Any

__all__ = ["PEOPLE_KEY", "PERSON_KEY", "PERSON_NAME", "people_key", "caseless", "is_full_name", "is_person",
           "begins_with_name", "person_named"]


_PEOPLE = (r"holder|cardholder|policyholder|patient|customer|client|member|guest|spouse|beneficiary|signer|passenger"
           r"|travell?er|person|user|student|patron|rider|subscriber|tenant|resident|applicant|caller|insured")
PEOPLE_KEY = re.compile(rf"(?i)(?:^|_)(?:{_PEOPLE})$")
"""Keys that say their record is a person (``holder``, ``patient``, ``account_holder``): a value under one shaped
like a person's name (``PERSON_NAME``) is personal, known to the name lists or not (``Siobhán Ní Bhriain``)."""
PERSON_KEY = re.compile(r"(?i)(?:^|_)(?:manager|requester|requestor|assignee|approver|owner|contact|author|reporter"
                        rf"|creator|recipient|sender|doctor|physician|employee|technician|supervisor|driver|{_PEOPLE})$"
                        r"|_(?:by|to)$")
"""Keys that name who someone is to a record (``manager``, ``assignee``, ``opened_by``, ``assigned_to``), and
``PEOPLE_KEY``: a value under one shaped like a person's name, with a word that is a person's name, is personal
(not ``"owner": "Finance Team"``)."""

_UPPER = "[" + "".join(c for c in map(chr, range(0x41, 0x530)) if c.isupper()) + "]"
"""A capital letter of the Latin, Greek or Cyrillic alphabets (``Ó``, ``Ł``, ``Ж``)."""
_PARTICLE = r"(?:\s+(?:de|da|di|do|dos|das|du|del|della|der|den|van|von|ten|ter|le|la|al|el|bin|binti|ibn|bint|ní|nic))"
PERSON_NAME = re.compile(rf"{_UPPER}[^\W\d_]*(?:[-'’]{_UPPER}?[^\W\d_]+)*(?:{_PARTICLE}{{0,2}}\s+{_UPPER}[^\W\d_]*"
                         rf"(?:[-'’]{_UPPER}?[^\W\d_]+)*){{1,3}}")
"""A name shaped like a person's: two to four capitalised words of letters (``O'Donnell`` one of them), a
surname's particles between them (``Sven de Vries``, ``Ludwig van der Berg``)."""


@cache
def _names() -> tuple[frozenset[str], frozenset[str]]:
    """(given names, given names and surnames) of every locale Faker knows: each list of a provider whose name
    says first, middle or last names (``first_names_female``, ``last_names_male``, ``last_romanized_names`` …),
    without the words that are as often no name (``The``, ``Will``, ``Park``, ``Hill``: an English word of
    Faker's word list, a street's or a town's word)."""
    import faker.providers.address.en_US as address
    import faker.providers.lorem.en_US as lorem
    import faker.providers.person as person

    common = {word.lower() for word in (*lorem.Provider.word_list, *address.Provider.street_suffixes,
                                        *address.Provider.city_prefixes)}
    given: set[str] = set()
    surnames: set[str] = set()
    for module in pkgutil.iter_modules(person.__path__):
        provider = getattr(importlib.import_module(f"{person.__name__}.{module.name}"), "Provider", None)
        for attribute in dir(provider):
            into = given if attribute.startswith(("first_", "middle_")) else \
                surnames if "last_" in attribute and "_name" in attribute else None
            listed = getattr(provider, attribute, None)
            if into is not None and isinstance(listed, dict | list | tuple | set | frozenset):
                into.update(name for name in _strings(listed) if name.lower() not in common)
    return frozenset(given), frozenset(given | surnames)


def _strings(listed: Any) -> Iterator[str]:
    """The names of a list (or the keys of a weighted one), pairs of names included."""
    for item in listed:
        if isinstance(item, str):
            yield item
        elif isinstance(item, tuple):
            yield from (part for part in item if isinstance(part, str))


def is_full_name(text: str) -> bool:
    """Whether capitalised words hold a person's name: a given name, then a given name or a surname (``Kevin
    Smith``, ``Dear Maria Gonzalez``, ``Иван Петров``; not ``New York``, ``Lincoln Park`` or ``West Coast``)."""
    words = text.split()
    given, either = _names()
    return any(_known(first, given) and _known(second, either) for first, second in zip(words, words[1:]))


def is_person(text: str) -> bool:
    """Whether a name-shaped text has a word, or a part of a double name, that is a person's name (``Tomasz
    O'Donnell``, ``Finn``, ``Adebayo-Okafor``; not ``Finance Team``, ``Front Desk`` or ``Galaxy``)."""
    return any(part in _names()[1] for word in text.split() for part in word.strip(".,").split("-"))


def begins_with_name(text: str) -> bool:
    """Whether a text of a script written without spaces begins with a person's name (``佐藤花子``; not
    ``予約``)."""
    return any(text[:n] in _names()[1] for n in (1, 2, 3))


def _known(word: str, names: frozenset[str]) -> bool:
    """A word is a known name, or each part of it is (``Jean-Luc``, ``Running-Water``)."""
    return word in names or ("-" in word and all(part in names for part in word.split("-")))


def person_named(key: str, text: str) -> bool:
    """Whether a tool's value is a person's name: shaped as one under a key that says its record is a person
    (``account_holder``, ``beneficiaries``, ``guest_name``: ``people_key``); shaped as one, with a word that is a
    person's name, under a key that says who someone is to a record (``manager``, ``opened_by``, ``drivers``,
    ``driver_name``; not ``"owner": "Finance Team"``); a given name
    and a surname under any key (``"third_party": "Tomasz Kowalczyk"``); or words of a script without capitals
    under a key ending in ``name`` (``"driver_name": "طارق حداد"``)."""
    if PERSON_NAME.fullmatch(text):
        return people_key(key) or (_says(PERSON_KEY, key) and is_person(text)) or is_full_name(text)
    words = text.split()
    return key.lower().endswith("name") and 2 <= len(words) <= 4 and all(map(str.isalpha, words)) and caseless(text)


def people_key(key: str) -> bool:
    """Whether a key says its value is people (``PEOPLE_KEY``), in the plural or with ``_name`` too
    (``beneficiaries``, ``guests``, ``guest_name``)."""
    return _says(PEOPLE_KEY, key)


@lru_cache(maxsize=4096)  # a log names few keys, each many times
def _says(keys: re.Pattern[str], key: str) -> bool:
    """Whether ``key``, in the singular and without ``_name``, is one of ``keys``."""
    stem = re.sub(r"(?i)_?names?$", "", key) or key
    return any(keys.search(form) for form in (stem, re.sub(r"ies$", "y", stem), re.sub(r"s$", "", stem)))


def caseless(text: str) -> bool:
    """Whether ``text``'s letters are of a script without capitals (Arabic, Chinese …), so no capital marks a name."""
    return not any(c.isupper() or c.islower() for c in text)
