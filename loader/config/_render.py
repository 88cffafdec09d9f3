"""Rendering a composed configuration for `dsh config show` (SPEC §19, §14.2 item 5).

The YAML is written by hand rather than dumped with ruamel: ruamel writes `None` as an empty value
and places end-of-line comments at uneven columns, while people read this output to answer "where
did this value come from?", so every leaf gets `# <source>` in one aligned column. The text is
still YAML whose data equals the composed values (tests load it back).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["render_yaml"]

DEFAULT_SOURCE = "default"
_INDENT = "  "
_ALIGN_LIMIT = 60  # longer lines (a custom system prompt) do not push every comment to the right


def render_yaml(values: Mapping[str, Any], provenance: Mapping[str, str]) -> str:
    """Block-style YAML of `values` with `provenance[dotted.path]` as a comment on each leaf."""
    lines: list[tuple[str, str | None]] = []
    _walk(values, "", 0, provenance, lines)
    width = max((len(text) for text, source in lines if source is not None and len(text) <= _ALIGN_LIMIT), default=0)
    out = [text if source is None else f"{text.ljust(width)}  # {source}" for text, source in lines]
    return "\n".join(out) + "\n"


def _walk(
    node: Mapping[str, Any],
    prefix: str,
    depth: int,
    provenance: Mapping[str, str],
    lines: list[tuple[str, str | None]],
) -> None:
    for key, value in node.items():
        path = f"{prefix}.{key}" if prefix else key
        indent = _INDENT * depth
        if isinstance(value, Mapping):
            lines.append((f"{indent}{key}:", None))
            _walk(value, path, depth + 1, provenance, lines)
        else:
            lines.append((f"{indent}{key}: {_scalar(value)}", provenance.get(path, DEFAULT_SOURCE)))


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    return text if _plain_is_safe(text) else json.dumps(text, ensure_ascii=False)


def _plain_is_safe(text: str) -> bool:
    """A string may be written unquoted iff reading it back (comment included) gives it again."""
    if not text or "\n" in text or text != text.strip():
        return False
    from ruamel.yaml import YAML  # deferred: only `dsh config show` renders (a run never does)
    from ruamel.yaml.error import YAMLError

    try:
        loaded = YAML(typ="safe", pure=True).load(f"k: {text}  # c\n")
    except YAMLError:
        return False
    return isinstance(loaded, dict) and loaded.get("k") == text
