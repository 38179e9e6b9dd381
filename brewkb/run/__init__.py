"""Runs: what one ``runs/<id>/`` folder holds and the code that fills it.

It owns the run folder and its manifest (``folder``), the pipeline that runs
the stages and persists their outputs (``pipeline``), budgets (``budget``),
the spending plan (``plan``), the record of a finished run (``record``), the
report (``report``) and what ``brewkb serve`` writes into a serve run
(``recordings``).

It may import the search, the stages, agents, environments, the LLM layer,
retrieval and git; only the API layer imports it.
"""
