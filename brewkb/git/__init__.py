"""Git: the one subsystem that talks to git (through GitPython and git's own
commands). It owns the object database writes (``objects``; ``pack`` writes
many objects as one pack), ref updates with compare-and-swap (``refdb``), the
notes that hold rewards (``notes``), the ``GitStore`` that joins them
(``store``) and the value objects that name a run's refs (``refs``).

It may import ``brewkb.errors`` and nothing else of brewkb: everything above it
receives values.
"""
