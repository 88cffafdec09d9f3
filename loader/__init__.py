"""dsh runtime: one agent tree per process on one asyncio loop.

Layering (a package imports only from packages to its left)::

    abort, ids, errors, texts ← session/ ← agent/ ← subagents/ ← tools/ ← headless ← cli/
    beside the spine: models/ (protocol ← providers), config/, host/; testing/ sits on headless

`agent/` imports only the protocol from `models/`; `headless.py` picks providers and config.
"""
