"""Fast readings of YAML inputs that the position-marked loader (`yamlpos`) vouches for.

A JSON document both parsers read alike, or a shipped profile, overlay or transcript whose exact
text the marked loader has already read (`shipped_parsed.json`, written by
`scripts/shipped_parsed.py`), needs no ruamel: that costs most of a short run's start-up (issue 13).
Anything else returns `NOT_FAST`, and `yamlpos` reads it with every refusal and position.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


class _NotFast(Exception):
    """The fast path cannot vouch for this document; the marked loader decides."""


NOT_FAST: Any = object()
"""What a fast reader returns when it cannot vouch for a text."""
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # json pairs them, ruamel keeps two code points


def fast_json(text: str, *, max_depth: int, max_int_digits: int) -> Any:
    """`text` as builtin data if it is JSON both parsers read the same way, else `NOT_FAST`.

    `max_depth` should sit a little below the marked loader's own limit: near it, that loader's
    count decides; an integer of `max_int_digits` or more digits is left to it as well."""
    head = text.lstrip(" \t\r\n")[:1]
    if head not in ("{", "[") or _SURROGATE_ESCAPE.search(text):
        return NOT_FAST
    try:
        data = json.loads(text, object_pairs_hook=_unique_pairs, parse_int=functools.partial(_short_int, max_int_digits), parse_constant=_no_constant)
    except (_NotFast, ValueError, RecursionError):
        return NOT_FAST
    if _depth_exceeds(data, max_depth):
        return NOT_FAST
    return data


SHIPPED_TABLE = Path(__file__).with_name("shipped_parsed.json")
"""What the marked loader reads in each shipped profile, overlay and transcript, keyed by the
SHA-256 of the file's text (`scripts/shipped_parsed.py` writes it; a test keeps it exact)."""


def shipped_reading(text: str) -> Any:
    """The marked loader's reading of `text`, if `text` is a shipped file's exact text, else
    `NOT_FAST`. The table was produced by the marked loader from the same text, so every refusal
    of the module docstring has been applied already; a file edited since reads through ruamel."""
    entry = _shipped_table().get(hashlib.sha256(text.encode("utf-8")).hexdigest())
    # Each entry is JSON text, decoded per read: every caller gets its own objects to keep or change.
    return json.loads(entry) if isinstance(entry, str) else NOT_FAST


@functools.cache
def _shipped_table() -> dict[str, str]:
    try:
        table = json.loads(SHIPPED_TABLE.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # not installed with the package: every file takes ruamel's path
        logger.debug("no shipped YAML table at %s", SHIPPED_TABLE)
        return {}
    documents = table.get("documents") if isinstance(table, dict) else None
    return documents if isinstance(documents, dict) else {}


def same(a: Any, b: Any) -> bool:
    """Equal with equal types all the way down (`True == 1` and `{1: x} != {"1": x}` matter here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _NotFast()  # a duplicate key: the marked loader reports it at its position
    return out


def _short_int(max_digits: int, literal: str) -> int:
    if len(literal) >= max_digits:
        raise _NotFast()
    return int(literal)


def _no_constant(literal: str) -> Any:
    raise _NotFast()  # NaN / Infinity are not JSON and read as strings in YAML


def _depth_exceeds(data: Any, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False
