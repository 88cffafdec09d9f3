"""YAML with source positions, so validation errors can point at a line (SPEC §14.2 item 5, §15.1).

Profiles, overlays and transcripts are read with ruamel.yaml's round-trip loader because it keeps
the line and column of every key and sequence item (`CommentedMap.lc`); pydantic only knows the
abstract `loc` of an error. `locate` walks that `loc` through the marked data and returns the
position to report; `key_path` renders the same walk as `a.b[0].c` for the `<key.path>` part.

Position rules (our decision, shared by every loader):
- a key that exists (including an unknown key) reports the key's own position;
- a missing key reports the position of its parent mapping (the key naming that mapping, or the
  document start for the top level);
- loc parts that are not data (pydantic union tags such as `str`, the `[key]` marker of dict-key
  errors) end the walk at the last real node.

Lines and columns are 1-based in everything this module returns; ruamel's marks are 0-based.

Hostile input (issue 15 item 2): files are read through `loader.inputfile.read_input` (regular
files only, no symlinks, a size limit), and the composer refuses, at the offending node and before
anything is built from it, every anchor and alias (so an alias bomb costs one event, not an
expansion), every explicit tag (`!foo`, and `!!str`, which the round-trip loader would keep as a
`TaggedScalar`), nesting deeper than `MAX_DEPTH` and integers longer than `MAX_INT_DIGITS` digits
(Python refuses to convert beyond 4,300 digits, and no setting needs more than a handful).

Validation runs on `plain(data)`, a deep copy in builtin types, so validated models never hold
ruamel's `CommentedMap`/`ScalarString` subclasses; the marked original is kept only for `locate`.

Fast path (issue 13; the readers live in `yamlfast`): the round-trip loader is pure Python (a 170 KB
generated transcript cost 9 M calls). `read_yaml` parses a document that is plain JSON (JSON is YAML 1.2) with the C `json`
module instead and builds the marked tree only when a caller asks for positions, i.e. to report an
error. The fast path accepts a document only where both parsers agree: anything it cannot vouch for
(duplicate keys, `NaN`, escaped surrogates, nesting or integers near the limits, any parse error)
goes to the marked loader, which applies every refusal above and reports its own position. The size
bound is the same `read_input` call either way. The shipped profiles, overlays and transcripts are
YAML proper, not JSON: for them `shipped_parsed.json` holds what the marked loader reads in each, by
the SHA-256 of its text, so a `dsh run --transcript NAME` neither imports ruamel nor runs its
pure-Python parser unless it must report an error; ruamel is imported on first use (`_marked_yaml`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from dsh.loader.inputfile import InputRefused, read_input
from dsh.loader.yamlfast import NOT_FAST, SHIPPED_TABLE, fast_json, same, shipped_reading

__all__ = [
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "Loc",
    "YamlDocument",
    "YamlProblem",
    "key_path",
    "load_yaml_with_marks",
    "locate",
    "plain",
    "read_yaml",
    "shipped_table_entry",
]

logger = logging.getLogger(__name__)

Loc = tuple[int | str, ...]
"""A pydantic error `loc`: mapping keys and sequence indexes from the document root."""

_DICT_KEY_MARKER = "[key]"

MAX_DEPTH = 64
"""Nested mappings and sequences allowed; deeper input is refused at the first node past it."""
MAX_INT_DIGITS = 64
"""Digits an integer may have; longer ones are refused (Python itself stops at 4,300)."""
_INT_TAG = "tag:yaml.org,2002:int"
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_STR_TAG = "tag:yaml.org,2002:str"


class YamlProblem(Exception):
    """A file that is not acceptable YAML. `str()` is `<file>:<line>:<col>: <problem>`, or
    `<file>: <problem>` for a problem of the whole file (`line` 0: not a regular file, too large).

    Callers re-raise it as their own error type (`ConfigError`, `TranscriptError`) so the exit code
    stays theirs; this module stays free of those layers.
    """

    def __init__(self, path: Path, line: int, col: int, problem: str) -> None:
        super().__init__(self._render(str(path), line, col, problem))
        self.path = path
        self.line = line
        self.col = col
        self.problem = problem

    def render(self, label: str) -> str:
        """The same line with `label` (a display path) in place of the path."""
        return self._render(label, self.line, self.col, self.problem)

    @staticmethod
    def _render(where: str, line: int, col: int, problem: str) -> str:
        return f"{where}:{line}:{col}: {problem}" if line > 0 else f"{where}: {problem}"


@functools.cache
def _marked_yaml() -> Any:
    """ruamel.yaml's round-trip loader with the checks of the module docstring, built on first use:
    importing ruamel costs a short `dsh run` several percent, and a document that takes a fast path
    (JSON, or a shipped file) needs it only to report an error (issue 13). Returns the module
    namespace the marked loader needs."""
    from types import SimpleNamespace

    from ruamel.yaml import YAML
    from ruamel.yaml.composer import Composer
    from ruamel.yaml.error import MarkedYAMLError, YAMLError
    from ruamel.yaml.events import AliasEvent, CollectionStartEvent, ScalarEvent
    from ruamel.yaml.nodes import ScalarNode
    from ruamel.yaml.scanner import RoundTripScanner
    from ruamel.yaml.tag import Tag

    class _Refusal(MarkedYAMLError):
        """Raised inside the composer; `load_yaml_with_marks` turns it into a `YamlProblem`."""

    class _CheckedComposer(Composer):
        """The round-trip composer with the hostile-input checks of the module docstring applied to
        each event before the node is composed."""

        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.parser.peek_event()
            if isinstance(event, AliasEvent):
                self._refuse(event, f"aliases are not supported (found *{event.anchor})")
            if event.anchor is not None:
                self._refuse(event, f"anchors are not supported (found &{event.anchor})")
            if isinstance(event, (ScalarEvent, CollectionStartEvent)) and event.ctag is not None:
                self._refuse(event, f"explicit tags are not supported (found {event.ctag})")
            if isinstance(event, CollectionStartEvent) and self.depth >= MAX_DEPTH:
                self._refuse(event, f"nested deeper than {MAX_DEPTH} levels")
            node = super().compose_node(parent, index)
            if isinstance(node, ScalarNode):
                tag = str(node.tag)
                if tag == _INT_TAG and _digits(node.value) > MAX_INT_DIGITS:
                    raise _Refusal(None, None, f"integer longer than {MAX_INT_DIGITS} digits", node.start_mark)
                if tag == _TIMESTAMP_TAG:
                    # No setting is a date, and `2001-13-45` would raise ValueError in the constructor:
                    # keep it as the text it is, so the schema reports it at its key like any bad value.
                    node.tag = Tag(suffix=_STR_TAG)
            return node

        def _refuse(self, event: Any, problem: str) -> None:
            raise _Refusal(None, None, problem, event.start_mark)

    class _CheckedScanner(RoundTripScanner):
        """Refuses flow nesting past `MAX_DEPTH` while scanning. ruamel looks ahead over an open flow
        collection for simple keys at every level, which is quadratic in the depth: 1,000 nested `[`
        took 1.3 s before the composer's own count saw the first of them. The count is the composer's:
        open block collections (`indents`) plus open flow collections, so the refusal has the
        composer's message at the composer's place (an indentless block sequence, which pushes no
        indent, can only move it later, never earlier)."""

        def fetch_flow_collection_start(self, TokenClass: Any, to_push: str) -> None:
            if len(self.indents) + len(self.flow_context) >= MAX_DEPTH:
                mark = self.reader.get_mark()
                raise _Refusal(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
            super().fetch_flow_collection_start(TokenClass, to_push)

    return SimpleNamespace(YAML=YAML, MarkedYAMLError=MarkedYAMLError, YAMLError=YAMLError,
                           Composer=_CheckedComposer, Scanner=_CheckedScanner)


def _digits(value: str) -> int:
    return sum(ch.isalnum() for ch in value)


def load_yaml_with_marks(path: Path) -> Any:
    """Parse `path` with the round-trip loader; duplicate keys are errors (ruamel's default).

    Returns `CommentedMap`/`CommentedSeq`/scalars, or `None` for an empty document.
    """
    return _compose_marked(path, _read_text(path))


class YamlDocument:
    """One parsed input file: `data` in builtin types, and the marked tree on demand (`marked()`),
    composed from the same text, so positions always describe the bytes that were validated."""

    def __init__(self, path: Path, text: str, data: Any, marked: Any = None) -> None:
        self.path = path
        self.text = text
        self.data = data
        self._marked = marked
        self._has_marked = marked is not None

    def marked(self) -> Any:
        """The position-marked tree for `locate`/`key_path` (composed once, on first use)."""
        if not self._has_marked:
            self._marked = _compose_marked(self.path, self.text)
            self._has_marked = True
        return self._marked


def read_yaml(path: Path) -> YamlDocument:
    """Parse `path` fast where that is safe (module docstring), else with the marked loader.

    Raises `YamlProblem` exactly where `load_yaml_with_marks` would.
    """
    text = _read_text(path)
    data = fast_json(text, max_depth=MAX_DEPTH - 2, max_int_digits=MAX_INT_DIGITS)
    if data is NOT_FAST:
        data = shipped_reading(text)
    if data is not NOT_FAST:
        return YamlDocument(path, text, data)
    marked = _compose_marked(path, text)
    return YamlDocument(path, text, plain(marked), marked)


def shipped_table_entry(path: Path) -> tuple[str, str]:
    """`(digest, JSON text)` for the table: the marked loader's reading of `path` in builtin types.
    Refuses (ValueError) data that JSON would not give back as it is: a non-string key, NaN."""
    text = _read_text(path)
    data = plain(_compose_marked(path, text))
    encoded = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    if not same(json.loads(encoded), data):
        raise ValueError(f"{path}: its data does not survive JSON (a non-string key?)")
    return hashlib.sha256(text.encode("utf-8")).hexdigest(), encoded


def _read_text(path: Path) -> str:
    try:
        raw = read_input(path)
    except InputRefused as exc:
        raise YamlProblem(exc.path, 0, 0, exc.problem) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlProblem(path, 1, 1, f"not UTF-8 text: {exc.reason}") from exc


def _compose_marked(path: Path, text: str) -> Any:
    marked = _marked_yaml()
    yaml = marked.YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    yaml.Composer = marked.Composer
    yaml.Scanner = marked.Scanner
    try:
        return yaml.load(text)
    except marked.MarkedYAMLError as exc:
        raise _problem_from(path, exc) from exc
    except marked.YAMLError as exc:  # unmarked ruamel errors are rare; report them at the file start
        raise YamlProblem(path, 1, 1, str(exc).strip()) from exc
    except (ValueError, OverflowError) as exc:  # a constructor refusing a value; not expected
        raise YamlProblem(path, 1, 1, f"a value cannot be read: {exc}") from exc


def _problem_from(path: Path, exc: Any) -> YamlProblem:  # a ruamel MarkedYAMLError
    mark = exc.problem_mark or exc.context_mark
    line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    problem = (exc.problem or exc.context or "invalid YAML").strip()
    if exc.context and exc.problem and "duplicate key" not in exc.problem:
        # "while parsing a flow sequence: expected ',' or ']'" reads better than the bare problem.
        problem = f"{exc.context.strip()}: {problem}"
    return YamlProblem(path, line, col, problem)


def plain(data: Any) -> Any:
    """Deep copy into builtin dict/list/str/int/float so validated models hold no ruamel types."""
    if isinstance(data, dict):
        return {plain(k): plain(v) for k, v in data.items()}
    if isinstance(data, list):
        return [plain(v) for v in data]
    if isinstance(data, bool) or data is None:
        return data
    if isinstance(data, str):
        return str(data)
    if isinstance(data, int):
        return int(data)
    if isinstance(data, float):
        return float(data)
    return data


def locate(data: Any, loc: Loc) -> tuple[int, int]:
    """The 1-based (line, col) to report for an error at `loc` (rules in the module docstring)."""
    line, col, _ = _walk(data, loc)
    return line, col


def key_path(data: Any, loc: Loc) -> str:
    """`loc` rendered as `agents.root.replies[0].text`, keeping only parts that name data."""
    _, _, parts = _walk(data, loc)
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _walk(data: Any, loc: Loc) -> tuple[int, int, list[int | str]]:
    from ruamel.yaml.comments import CommentedMap, CommentedSeq  # loaded already: `data` is its tree

    node = data
    line, col = _node_start(data)
    parts: list[int | str] = []
    for part in loc:
        if part == _DICT_KEY_MARKER:
            break  # the previous step already sits on the offending key
        if isinstance(node, CommentedMap):
            if part not in node:
                # Missing key: report the parent mapping's position, but name the key.
                if isinstance(part, str):
                    parts.append(part)
                break
            line, col = _one_based(node.lc.key(part))
            parts.append(part)
            node = node[part]
        elif isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
            line, col = _one_based(node.lc.item(part))
            parts.append(part)
            node = node[part]
        else:
            break  # a scalar, or a loc part that is a pydantic tag rather than data
    return line, col, parts


def _node_start(node: Any) -> tuple[int, int]:
    lc = getattr(node, "lc", None)
    if lc is None or lc.line is None:
        return 1, 1
    return lc.line + 1, lc.col + 1


def _one_based(pos: tuple[int, int] | None) -> tuple[int, int]:
    if pos is None:
        return 1, 1
    return pos[0] + 1, pos[1] + 1
