"""JSON from someone else, with limits (issue 15 items 2, 5): a `DSH_*` section value, a control
socket frame.

`json.loads` alone raises four kinds of error on hostile text: `JSONDecodeError`, `UnicodeDecodeError`
(invalid UTF-8 bytes), `RecursionError` (nesting past the interpreter's limit) and a bare
`ValueError` (an integer over 4,300 digits), and it accepts `NaN`/`Infinity` and lone surrogates
(`"\\ud800"`), which cannot be written back as UTF-8. `loads_bounded` turns all of these into one
`JsonProblem` and also refuses nesting deeper than `MAX_DEPTH` and integers longer than
`MAX_INT_DIGITS` digits, the same bounds the YAML loader applies. Stdlib only.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_INT_DIGITS", "JsonProblem", "loads_bounded"]

MAX_DEPTH = 64
MAX_INT_DIGITS = 64


class JsonProblem(ValueError):
    """Text that is not acceptable JSON; `msg` says why in a few words (no input echoed)."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self.msg = msg


def loads_bounded(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """The decoded value, or `JsonProblem` (rules in the module docstring)."""
    try:
        if isinstance(text, str):
            if text.startswith("\ufeff"):  # as json.loads says it; the decoder alone would not
                raise JsonProblem("Unexpected UTF-8 BOM (decode using utf-8-sig)")
            value = _DECODER.decode(text)
        else:
            value = json.loads(text, parse_int=_parse_int, parse_constant=_refuse_constant)
    except JsonProblem:
        raise
    except RecursionError:
        raise JsonProblem(f"nested deeper than {max_depth} levels") from None
    except UnicodeDecodeError:
        raise JsonProblem("not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise JsonProblem(exc.msg) from None
    except ValueError as exc:  # anything else the decoder refuses
        raise JsonProblem(str(exc).split(":")[0]) from None
    if isinstance(text, str) and "\\u" not in text and text.count("[") + text.count("{") <= max_depth:
        # The common case, a small request (issue 15 item 8: this walk was a tenth of a control
        # call): with no `\u` escape every string in the value is a slice of `text`, so one check
        # of `text` covers them, and a value cannot nest deeper than `text` has brackets.
        _check_text(text)
    else:
        _check(value, max_depth)
    return value


def _refuse_constant(name: str) -> Any:
    raise JsonProblem(f"{name} is not JSON")


def _parse_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise JsonProblem(f"integer longer than {MAX_INT_DIGITS} digits")
    return int(digits)


# One decoder: `json.loads` with hooks builds a new one per call.
_DECODER = json.JSONDecoder(parse_int=_parse_int, parse_constant=_refuse_constant)


def _check(value: Any, max_depth: int) -> None:
    """Depth and lone surrogates, iteratively (the value may be as deep as the decoder allowed)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            _check_text(node)
        elif isinstance(node, (dict, list)):
            if depth > max_depth:
                raise JsonProblem(f"nested deeper than {max_depth} levels")
            if isinstance(node, dict):
                for key, sub in node.items():
                    _check_text(key)
                    stack.append((sub, depth + 1))
            else:
                stack.extend((sub, depth + 1) for sub in node)


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise JsonProblem("a string holds a lone surrogate, which is not Unicode text") from None
