"""The JSON text of event data (SPEC §5.1: compact UTF-8 JSON, no NaN/Infinity), shared by
`Session._append` and the request records (`requests.py`), so text made once for many sessions is
exactly the text an append would make.

One C encoder is reused for every event (issue 13): `JSONEncoder.encode` builds a new one, and a
closure, per call, which cost as much as the encoding of a small event itself. Same text, same
errors (the C path is the one `encode` takes); the circular-reference markers are emptied after a
failed encode, since the C encoder leaves them behind when it raises.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["_MARKERS", "_c_encode", "_decode", "_decode_object", "_encode", "_encode_other", "_scan"]

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_encode_other = _ENCODER.encode  # any value (the event type's text); dicts take `_encode`
_decode = json.JSONDecoder().decode
_scan: Callable[[str, int], tuple[Any, int]] = getattr(json.JSONDecoder(), "scan_once")  # noqa: B009 - untyped in typeshed
_c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)
_MARKERS: dict[int, Any] = {}
_c_encode: Any = None if _c_make_encoder is None else _c_make_encoder(
    _MARKERS, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",", False, False, False
)


def _encode(data: dict[str, Any]) -> str:
    if _c_encode is None:  # pragma: no cover - CPython ships the C encoder
        return _encode_other(data)
    try:
        return "".join(_c_encode(data, 0))
    except BaseException:
        _MARKERS.clear()
        raise


def _decode_object(text: str) -> Any:
    """`_decode` for a text `_encode` made (no surrounding whitespace): the C scanner, without
    `decode`'s two whitespace matches and frames."""
    return _scan(text, 0)[0]
