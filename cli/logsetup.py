"""`dsh run -v` and `DSH_LOG=LEVEL` (issue 11 item 1): the runtime's log records on stderr.

Library code only logs (STYLE §11); this is the one place a handler is attached, for the length of
one command, so an in-process caller (tests, `CliRunner`) is left with the logging it had. Records of
`loader.*` go out at the chosen level; httpx's one line per HTTP request (method, URL, status) at
INFO. httpcore's wire-level debug records are never enabled.

The API key: no log call passes it, and as a second line of defence a filter replaces every secret
value handed to `log_to_stderr` with `***` in the formatted line, so a future record that did
include it (an exception text echoing a header, say) still cannot print it.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

__all__ = ["LOG_ENV", "log_level", "log_to_stderr"]

LOG_ENV = "DSH_LOG"
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
_LOGGERS = ("dsh.loader", "httpx")


def log_level(verbose: bool, environ: Mapping[str, str]) -> int | None:
    """`-v` means debug; else `DSH_LOG` (debug, info, warning, error; case-insensitive); else None,
    which leaves logging as it is (warnings still reach stderr through logging's last resort)."""
    if verbose:
        return logging.DEBUG
    value = environ.get(LOG_ENV, "").strip().lower()
    return _LEVELS.get(value)


class _Redact(logging.Formatter):
    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__("dsh: %(levelname)s %(name)s: %(message)s")
        self._secrets = [s for s in secrets if s]

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        for secret in self._secrets:
            line = line.replace(secret, "***")
        return line


@contextmanager
def log_to_stderr(level: int | None, secrets: Iterable[str] = ()) -> Iterator[None]:
    """Send `dsh.loader.*` (and httpx's request lines) to stderr at `level` while the block runs."""
    if level is None:
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Redact(secrets))
    saved: list[tuple[logging.Logger, int, bool]] = []
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.level, logger.propagate))
        logger.setLevel(level if name == "dsh.loader" else max(level, logging.INFO))
        logger.addHandler(handler)
        logger.propagate = False  # one line per record, whatever the root logger does
    try:
        yield
    finally:
        for logger, old_level, old_propagate in saved:
            logger.removeHandler(handler)
            logger.setLevel(old_level)
            logger.propagate = old_propagate
        handler.flush()
