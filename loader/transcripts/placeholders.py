"""Placeholders in transcript replies (SPEC §15.2), resolved when a reply is served.

`{{child:<callId>}}` becomes the session id spawned by that tool call and `{{session:<agentKey>}}`
the live session id bound to that key. Only these two kinds are recognised; any other `{{…}}` text
passes through untouched, so replies may quote template syntax. Resolution walks every string of the
value, mapping keys included, and never mutates its input.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Literal

__all__ = ["PlaceholderKind", "UnresolvedPlaceholder", "may_hold_placeholders", "resolve_placeholders"]

PlaceholderKind = Literal["child", "session"]

_PLACEHOLDER_RE = re.compile(r"\{\{(child|session):([^{}]*)\}\}")
_TEXT = json.JSONEncoder(ensure_ascii=False).encode  # one encoder: `json.dumps` with options builds one per call


class UnresolvedPlaceholder(LookupError):
    def __init__(self, placeholder: str) -> None:
        super().__init__(f"cannot resolve {placeholder}")
        self.placeholder = placeholder


def may_hold_placeholders(value: Any) -> bool:
    """Whether some string of `value` (mapping keys included) may hold a placeholder, by one search
    of its JSON text (issue 13: most replies have none, and the walk copied every one of them).

    A superset, never a miss: JSON escaping adds no braces, so a placeholder in any string is still
    a match in the text. A value that is not JSON (or a false match) just takes the walk.
    """
    try:
        text = _TEXT(value)
    except (TypeError, ValueError):
        return True
    return _PLACEHOLDER_RE.search(text) is not None


def resolve_placeholders(value: Any, lookup: Callable[[PlaceholderKind, str], str | None]) -> Any:
    """A copy of `value` with every placeholder replaced by `lookup(kind, name)`.

    Raises `UnresolvedPlaceholder` for the first placeholder whose lookup returns None.
    """
    if isinstance(value, str):
        return _resolve_str(value, lookup)
    if isinstance(value, dict):
        return {
            resolve_placeholders(k, lookup): resolve_placeholders(v, lookup)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [resolve_placeholders(v, lookup) for v in value]
    return value


def _resolve_str(text: str, lookup: Callable[[PlaceholderKind, str], str | None]) -> str:
    def replace(match: re.Match[str]) -> str:
        kind: PlaceholderKind = "child" if match.group(1) == "child" else "session"
        resolved = lookup(kind, match.group(2))
        if resolved is None:
            raise UnresolvedPlaceholder(match.group(0))
        return resolved

    return _PLACEHOLDER_RE.sub(replace, text)
