"""Trajectories: the record of one episode and the ways logs become one.

It owns the trajectory schema and its JSONL files (``schema``), the readers
of logged formats and their registry (``formats``, one module per format),
the outcomes files that label logged conversations (``outcomes``) and the
scrubbing of personal data before anything learns from a trajectory
(``scrub``).

It may import config, errors and fsutil; everything that reads or writes a
trajectory imports it.
"""
