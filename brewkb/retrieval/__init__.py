"""Retrieval: which recipes an agent sees for a request.

It owns the Tantivy analysis (``index``, the one module that imports tantivy),
the BM25 impact index that scores with it (``postings``), fusion with dense
vectors (``fusion``), ranking, caching and MRR over a KB state (``ranking``),
the context block an agent receives (``context``) and the MCP server that serves
a KB to other agents (``mcp_server``).

It may import the KB, recipes, config, the LLM layer (for embeddings) and
trajectories; never the stages, the search, runs or the CLI.
"""
