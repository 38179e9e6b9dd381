"""Retrieval: which recipes an agent sees for a request.

It owns the Tantivy analysis (``index``, the one module that imports tantivy),
the BM25 impact index that scores with it (``postings``), a recipe's quoted
requests as retrieval units and their exemplars (``anchors``), fusion with dense
vectors (``fusion``), ranking, caching and MRR over a KB state (``ranking``),
the context block an agent receives (``context``), the baselines' memories
(``memory``), retrieval measured on logged conversations (``logeval``,
``compare``) and the MCP server that serves a KB to other agents (``mcp_server``).

It may import the KB, recipes, config, the LLM layer (for embeddings) and
trajectories; never the stages, the search, runs or the CLI.
"""
