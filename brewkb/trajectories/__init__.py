"""Trajectories: the record of one episode and the ways logs become one.

It owns the trajectory schema and its JSONL files (``schema``), the readers
of logged formats and their registry (``formats``, one module per format,
which refuse names that are not identifiers), the outcomes files that label
logged conversations (``outcomes``), and the trust boundary for logs: the one
function every logged trajectory enters a run through (``boundary.admit``),
the scrubbing of secrets (``secrets``, detect-secrets) and personal data
(``scrub``), and the one place log text is quoted into a recipe or held back
(``quote``).

It may import config, errors and fsutil; everything that reads or writes a
trajectory imports it.
"""
