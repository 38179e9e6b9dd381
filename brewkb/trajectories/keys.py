"""Which keys of a tool's JSON name a person, a booking or an id, for ``brewkb.trajectories.scrub``: the
personal keys, the fields of a person's record, the keys of someone's health or household, and id keys."""

from __future__ import annotations

import re

__all__ = ["DEFAULT_KEYS", "PERSON_FIELDS", "SENSITIVE_KEY", "NAME_KEYS", "STREET_FIELDS", "ID_KEY", "ID_END", "MIN_ID",
           "MARKS", "is_id_key", "unmarked"]

ID_KEY = re.compile(r"(?:^|[_\-\s.])(?i:ids?)$|[a-z0-9](?:Id|ID)s?$|^(?:ID|Id)s?$|(?i:codes?|numbers?)$")
ID_END = re.compile(r"[_\-\s.]?(?:(?i:ids?|codes?|numbers?)|Ids?|IDs?)$")
"""The end of an id key that says what it is the id of (``patient_id`` → ``patient``)."""
MIN_ID = 4
"""Characters an id value needs (a value under an id key; ``12`` is too common to replace everywhere)."""
MARKS = "#№"
"""Leading marks an id is written with or without."""


def is_id_key(key: str) -> bool:
    """Whether a JSON key names an identifier: its name ends in ``id``/``ids``
    (as a word: ``order_id``, ``userId``, ``ID``; not ``paid``), ``code``/``codes``
    or ``number``/``numbers``."""
    return ID_KEY.search(key) is not None


def unmarked(value: str) -> str:
    """An id without its leading mark (``#W2905754`` → ``W2905754``)."""
    return value.lstrip(MARKS) or value


DEFAULT_KEYS: tuple[str, ...] = (
    "user_id", "customer_id", "account_id", "member_id", "order_id", "reservation_id", "booking_id",
    "confirmation_code", "ticket_id", "payment_id", "payment_method_id", "email", "phone", "phone_number",
    "first_name", "last_name", "full_name", "dob", "date_of_birth", "address1", "address2", "zip",
    "address", "street", "passport", "passport_number", "ssn", "iban", "password", "card_number",
    "login", "username", "user_name", "postcode", "postal_code", "zip_code", "birth_date", "birthdate",
    "plate", "license_plate", "licence_plate", "registration", "vin", "national_id",
)
"""JSON keys whose values in tool calls and results name a person or a booking."""

PERSON_FIELDS = frozenset({"name", "address", "street", "city", "zip_code", "postal_code", "postcode"})
"""Keys that are personal inside a record that also holds one of the personal keys (the town and postcode only
when it holds a street too)."""

SENSITIVE_KEY = re.compile(r"(?:^|_)(?:allerg(?:y|ies|ens?)|medications?|medicines?|drugs?|prescribed|indications?"
                           r"|symptoms?|diagnos[ie]s|disabilit(?:y|ies)"
                           r"|impairments?|medical(?:_(?:conditions?|notes?|needs|history|info))?"
                           r"|health_(?:conditions?|notes?|needs|history|info)"
                           r"|household(?:_members?)?|family_members?|dependants?|dependents?|next_of_kin|relatives)"
                           r"(?:_(?:notes?|list|info|details))?$")
"""Keys whose values are someone's health or household, whatever the record (``allergy_notes``, ``household``)."""
NAME_KEYS = frozenset({"name", "full_name"})
STREET_FIELDS = frozenset({"address", "address1", "address_line1", "street", "street_address"})
"""Keys of a street: a record with one is an address, and its town and postcode are personal too."""
