"""Trajectories: the record of one episode and the ways logs become one.

It owns the trajectory schema and its JSONL files (``schema``), the importers
of logged formats (``importers``) and the scrubbing of personal data before
anything learns from a trajectory (``scrub``).

It may import config, errors and fsutil; everything that reads or writes a
trajectory imports it.
"""
