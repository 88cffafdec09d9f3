"""dsh runtime: one agent tree per process on one asyncio loop.

Layering (a package imports only from packages to its left)::

    abort, errors, texts, inputfile, boundedjson ← ids, yamlpos, homedir ← session/ ← agent/ ← subagents/ ← tools/ ← headless ← cli/
    beside the spine: models/ (protocol ← providers), config/, host/; testing/ sits on headless

`agent/` imports only the protocol from `models/`; `headless.py` picks providers and config.
`tree` assembles agent, subagents and tools; `host/` (its RPC methods and server drive a `Tree`) and
`fences` build on `tree`, and `headless` on them. `tests/test_layers.py` pins these ranks by reading
every import, type-only and lazy ones included.
"""
