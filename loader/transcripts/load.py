"""Loading a transcript file into a validated `Transcript` (SPEC §15.1, §22).

Every failure a person can fix in the file is a `TranscriptError` whose message starts with
`<file>:<line>:<col>:` (1-based): malformed YAML reports the parser's position and problem; schema
errors report `<key.path>: <problem>` at the key (see `loader.yamlpos` for the position rules). When
several keys are wrong, each gets its own line, in pydantic's order. An unknown shipped name or a
missing file stays a `ConfigError` from `loader.shipped`, which lists the available names.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsh.loader.errors import ConfigError, TranscriptError
from dsh.loader.shipped import resolve_name
from dsh.loader.transcripts.shapes import LocatedProblem
from dsh.loader.yamlpos import Loc, YamlDocument, YamlProblem, key_path, locate, read_yaml

if TYPE_CHECKING:
    from pydantic import ValidationError

    from dsh.loader.transcripts.schema import TranscriptSpec

__all__ = ["Transcript", "format_validation_error", "load_transcript"]

logger = logging.getLogger(__name__)

# pydantic's wording for these two reads oddly next to a YAML key; everything else is kept.
_PROBLEM_TEXT = {"extra_forbidden": "unknown key", "missing": "required key is missing"}


@dataclass(frozen=True)
class Transcript:
    """A validated transcript and the file it came from (the file stem names recordings, §15.5)."""

    spec: TranscriptSpec
    path: Path

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def task(self) -> str:
        return self.spec.task


def load_transcript(value: str | Path, *, lean: bool = False) -> Transcript:
    """Load a shipped transcript by name, or a file by path (`Path`, or str with `/` or `.yaml`).

    `lean`: validate without pydantic where `loader.transcripts.lean` is sure (issue 13; `dsh run`
    does), so `spec` may be a lean record of the same values instead of a `TranscriptSpec`; an
    invalid or unusual file still goes through pydantic, with the same error lines."""
    path = _resolve(value)
    try:
        document = read_yaml(path)  # fast parse; the position-marked tree only for an error
    except YamlProblem as exc:
        raise TranscriptError(str(exc)) from exc
    if not isinstance(document.data, dict):
        line, col = locate(_marked(document), ())
        raise TranscriptError(f"{path}:{line}:{col}: a transcript must be a YAML mapping")
    spec: TranscriptSpec | None = None
    if lean:
        from dsh.loader.transcripts.lean import lean_spec

        spec = lean_spec(document.data)
    if spec is None:
        from pydantic import ValidationError

        from dsh.loader.transcripts.schema import TranscriptSpec

        try:
            spec = TranscriptSpec.model_validate(document.data)
        except ValidationError as exc:
            raise TranscriptError(format_validation_error(path, _marked(document), exc)) from exc
    logger.debug("loaded transcript %s from %s", spec.name, path)
    return Transcript(spec=spec, path=path)


def _marked(document: YamlDocument) -> Any:
    try:
        return document.marked()
    except YamlProblem as exc:  # the fast parser accepted what the marked loader refuses
        raise TranscriptError(str(exc)) from exc


def _resolve(value: str | Path) -> Path:
    if isinstance(value, Path):
        if not value.is_file():
            raise ConfigError(f"{value}: no such file")
        return value
    return resolve_name("transcripts", value)


def format_validation_error(path: Path, data: Any, exc: ValidationError) -> str:
    """One `<file>:<line>:<col>: <key.path>: <problem>` line per distinct location, in position
    order; an unknown key names the closest valid one (issue 11 item 5).

    Union alternatives fail at the same key with one error each; they are joined with `; ` so the
    key appears once.
    """
    lines: dict[tuple[int, int, str], list[str]] = {}
    from dsh.loader.problems import unknown_key_problem
    from dsh.loader.transcripts.schema import TranscriptSpec

    for err in exc.errors():
        loc: Loc = tuple(err["loc"])
        problem = _PROBLEM_TEXT.get(err["type"], err["msg"])
        if err["type"] == "extra_forbidden":
            problem = unknown_key_problem(TranscriptSpec, loc)
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, LocatedProblem):
            loc = loc + cause.loc
            problem = str(cause)
        elif err["type"] == "value_error" and cause is not None:
            problem = str(cause)  # drop pydantic's "Value error, " prefix
        line, col = locate(data, loc)
        entry = lines.setdefault((line, col, key_path(data, loc)), [])
        if problem not in entry:
            entry.append(problem)
    return "\n".join(
        f"{path}:{line}:{col}: {keys + ': ' if keys else ''}{'; '.join(problems)}"
        for (line, col, keys), problems in sorted(lines.items(), key=lambda item: item[0][:2])
    )
