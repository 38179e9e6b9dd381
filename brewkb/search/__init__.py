"""The search over KB states (EG-MCTS, greedy, iterative), recorded in git.

It owns the engine that selects, expands, evaluates and gathers (``engine``),
the trees (``tree``), their persistence as node branches and notes (``store``),
the expand and evaluate steps of ``refine`` and ``distill`` and the final
choice with its no-regression gate (``final``).

It may import the stages, agents, environments, retrieval, the LLM layer and
git; never runs, the API or the CLI.
"""
