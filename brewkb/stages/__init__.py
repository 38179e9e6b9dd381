"""The BREW stages, one module each: values in, values out.

No stage writes a file, knows about git or imports another stage;
``brewkb.run.pipeline`` runs them and persists their outputs. A stage may
import agents (to run rollouts), environments, retrieval, the LLM layer and
trajectories.
"""
