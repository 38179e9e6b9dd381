"""Process isolation: every program brewkb starts for an episode.

It owns starting a program with caps on time and output (``subproc``), the
subreaper that ends a program's whole process tree (``reaper``) and the
bubblewrap sandbox for code an agent writes (``sandbox``).

It may import ``brewkb.errors`` only; agents and environments use it.
"""
