"""The `dsh` commands answered without building the Typer app (issue 13), and the prompt exit.

`dsh interrupt ADDRESS [--home H]`, `dsh send ADDRESS MESSAGE [--home H]` and `dsh --version` are
what a person types while a run is busy; building the app (typer, its pydantic coercion, every
command's signature) costs several times the work itself. `plan` recognises only the plainest shapes
of these argument vectors and returns a call that behaves like the app would: the same command
functions (`cli.control`, header check of issue 15 included), the same stdout, stderr and exit codes,
and click's handling of Ctrl-C (130) and a closed pipe (exit 1). Everything else (`--help`, a usage
error, `--`, an option-like value, a repeated `--home`, shell completion) returns None: the Typer app
answers it, with its own wording. `tests/cli/test_fastpath.py` runs both on a table of vectors.

`dsh run` takes the same road when its vector is plain (`_parse_run`: known options, each once but
`--overlay`, non-empty values that are not option-like, numbers in their plainest spelling, at most
one TASK and not `-`): `cli.run_command.run_command`, the function the Typer command calls, runs
without typer or the app, which were about a third of a `dsh run --transcript`'s start-up.

`exit_promptly` ends the process once stdout and stderr are flushed and the `atexit` handlers have
run, skipping the interpreter's teardown (tens of milliseconds of freeing objects after a `dsh run`).
It steps aside (the normal exit happens) when another thread is alive or a flush fails, so nothing
that the normal exit would write or report is lost.

`pause_gc` / `started` bracket start-up: the imports allocate a few hundred thousand long-lived
objects (modules, classes, pydantic schemas) and no garbage cycles, yet trigger about a hundred
collections that traverse them (~5% of a short `dsh run`). The console script pauses the cyclic
collector first; the command calls `started` once its imports are done (`dsh run` right before its
event loop, every other command from the app callback), which freezes what start-up allocated, so
later full collections skip it, and enables the collector again with a young-generation threshold of
`GC_THRESHOLD` instead of 700: a fan-out of 1,000 children allocates millions of containers, nearly
all freed by reference counting or kept for the whole run (events, sessions), and at 700 the
collector ran ~400 times and took ~15% of the run's CPU re-traversing survivors (issue 13; at
10,000 it runs ~20 times). The older generations keep short thresholds (5, 5), so cyclic garbage
is still reclaimed about as soon as before: peak RSS stayed at its old value (at (10,000, 20, 20)
it grew by 6 MiB at N=1,000). Stdlib only.
"""

from __future__ import annotations

import gc
import os
import sys

from dsh import cli

TYPE_CHECKING = False  # see cli.main: `dsh --version` imports neither typing nor pathlib
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

__all__ = ["RUN_FLAGS", "RUN_OPTIONS", "exit_promptly", "pause_gc", "plan", "started", "version_line"]

_ARITY = {"interrupt": 1, "send": 2}  # positional arguments of each command
_HOME = "--home"
_gc_paused = False  # by `pause_gc`: only then does `started` touch the collector
GC_THRESHOLD = (10_000, 5, 5)
"""`gc.set_threshold` once start-up is over (see the module docstring)."""


def pause_gc() -> None:
    """Disable the cyclic collector for start-up (see the module docstring)."""
    global _gc_paused
    if gc.isenabled():
        gc.disable()
        _gc_paused = True


def started() -> None:
    """Start-up is over: freeze its objects and enable the collector again, if `pause_gc` paused it
    (an in-process caller, such as a test, keeps its collector as it was)."""
    global _gc_paused
    if _gc_paused:
        _gc_paused = False
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLD)
        gc.enable()


def version_line() -> str:
    """What `dsh --version` prints (the package version is `cli.__version__`, see pyproject.toml)."""
    return f"dsh {cli.__version__}"


def plan(argv: Sequence[str], environ: Mapping[str, str]) -> Callable[[], object] | None:
    """The call that answers `argv` without Typer, or None when Typer must (see the module doc)."""
    if any(name.startswith("_") and name.endswith("_COMPLETE") for name in environ):
        return None  # click's shell-completion protocol (`_DSH_COMPLETE=...`)
    if list(argv) == ["--version"]:
        return _version
    if argv and argv[0] == "run":
        options = _parse_run(argv[1:])
        if options is None:
            return None
        return lambda: _as_click_would(lambda: _run(options))
    if not argv or argv[0] not in _ARITY:
        return None
    parsed = _parse(argv[1:], _ARITY[argv[0]])
    if parsed is None:
        return None
    positional, home = parsed
    if argv[0] == "interrupt":
        return lambda: _as_click_would(lambda: _interrupt(positional[0], home))
    return lambda: _as_click_would(lambda: _send(positional[0], positional[1], home))


def _parse(args: Sequence[str], arity: int) -> tuple[list[str], Path | None] | None:
    """`(positional, home)` for exactly `arity` positionals and at most one `--home`, else None."""
    positional: list[str] = []
    home: str | None = None
    i = 0
    while i < len(args):
        token = args[i]
        if token == _HOME or token.startswith(_HOME + "="):
            if home is not None:
                return None  # repeated: click takes the last one; leave it to click
            if token == _HOME:
                if i + 1 == len(args):
                    return None  # "requires an argument": Typer's usage error
                i += 1
                value = args[i]
            else:
                value = token[len(_HOME) + 1:]
            if value.startswith("-"):
                return None
            home = value
        elif token.startswith("-"):
            return None  # --help, --, an unknown option, or an option-like positional
        else:
            positional.append(token)
        i += 1
    if len(positional) != arity:
        return None
    from pathlib import Path

    return positional, (Path(home) if home is not None else None)


def _parse_run(args: Sequence[str]) -> dict[str, object] | None:
    """`run_command`'s keyword arguments for a plain `dsh run` vector, else None: at most one TASK,
    options from `RUN_OPTIONS` / `RUN_FLAGS` each given once (`--overlay` may repeat), every value
    non-empty, not option-like, and for a number in its plainest spelling, so that click and typer
    could not read it differently."""
    import re

    options: dict[str, object] = {}
    task: str | None = None
    i = 0
    while i < len(args):
        token = args[i]
        name, eq, inline = token.partition("=")
        if token in RUN_FLAGS:
            parameter = RUN_FLAGS[token]
            if parameter in options:
                return None
            options[parameter] = True
        elif name in RUN_OPTIONS:
            parameter, kind = RUN_OPTIONS[name]
            if eq:
                value = inline
            elif i + 1 < len(args):
                i += 1
                value = args[i]
            else:
                return None  # "requires an argument": Typer's usage error
            if not value or value.startswith("-") or (parameter in options and kind != "list"):
                return None
            if kind in _NUMBER and re.fullmatch(_NUMBER[kind], value) is None:
                return None
            if kind == "list":
                overlays = options.setdefault(parameter, [])
                assert isinstance(overlays, list)
                overlays.append(value)
            else:
                options[parameter] = _convert(kind, value)
        elif token.startswith("-") or task is not None:
            return None  # --help, --, `-` (stdin), an unknown option, a second positional
        else:
            task = token
        i += 1
    options["task"] = task
    return options


# `dsh run`'s options (cli/run.py) as the fast path reads them: option -> (parameter, kind). A test
# pins these tables to the Typer declaration (names, flags, types, repeatable or not).
RUN_OPTIONS: dict[str, tuple[str, str]] = {
    "--profile": ("profile", "str"),
    "--overlay": ("overlay", "list"),
    "--transcript": ("transcript", "str"),
    "--home": ("home", "path"),
    "--timeout": ("timeout", "float"),
    "--record": ("record", "path"),
    "--resume": ("resume", "str"),
    "--output-last-message": ("output_last_message", "path"),
    "--model": ("model", "str"),
    "--append-system-prompt": ("append_system_prompt", "str"),
    "--max-steps": ("max_steps", "int"),
    "--parked": ("parked", "str"),
    "--max-children": ("max_children", "int"),
    "--max-requests": ("max_requests", "int"),
    "--max-tokens": ("max_tokens", "int"),
    "--engine": ("engine", "str"),
}
RUN_FLAGS: dict[str, str] = {
    "--json": "json_output", "--force": "force", "--verbose": "verbose", "-v": "verbose",
    "--quiet": "quiet", "-q": "quiet",
}
_NUMBER = {"int": r"0|[1-9][0-9]{0,17}", "float": r"(0|[1-9][0-9]{0,17})(\.[0-9]{1,17})?"}


def _convert(kind: str, value: str) -> object:
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    if kind == "path":
        from pathlib import Path

        return Path(value)
    return value


def _run(options: dict[str, object]) -> None:
    from dsh.cli.run_command import run_command

    raise SystemExit(run_command(**options))  # type: ignore[arg-type]  # keys and types: _parse_run


def _interrupt(address: str, home: Path | None) -> None:
    from dsh.cli.control import interrupt

    interrupt(address, home)


def _send(address: str, message: str, home: Path | None) -> None:
    from dsh.cli.control import send

    send(address, message, home)


def _version() -> None:
    def say() -> None:
        if sys.stdout is None:  # started with stdout closed: click's `echo` writes nothing then
            return
        sys.stdout.write(version_line() + "\n")
        sys.stdout.flush()

    _as_click_would(say)


def _as_click_would(command: Callable[[], object]) -> None:
    """Run `command` the way click's standalone `main` runs a command, and always raise `SystemExit`.

    `typer.Exit` (what `cli.common.fail` raises) becomes its exit code; Ctrl-C exits 130; a closed
    stdout or stderr (EPIPE) exits 1 with both streams pacified; any other exception propagates to
    `cli.main.guard`, as it does out of the app."""
    try:
        command()
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except OSError as exc:
        import errno

        if exc.errno != errno.EPIPE:
            raise
        from typer._click.utils import PacifyFlushWrapper  # as click does; rare, so deferred

        sys.stdout = PacifyFlushWrapper(sys.stdout)
        sys.stderr = PacifyFlushWrapper(sys.stderr)
        raise SystemExit(1) from None
    except Exception as exc:
        from typer import Exit  # loaded already when `fail` raised it

        if not isinstance(exc, Exit):
            raise
        raise SystemExit(exc.exit_code) from None
    raise SystemExit(0)


def exit_promptly(exc: SystemExit) -> None:
    """`os._exit` with `exc`'s code once everything is flushed and the `atexit` handlers ran; returns
    (the caller re-raises for the normal exit) when that cannot be done without losing anything."""
    code = 0 if exc.code is None else exc.code
    if not isinstance(code, int):
        return  # a message to print: the interpreter does that
    if "threading" in sys.modules:
        import threading

        if threading.active_count() > 1:
            return  # the normal exit joins non-daemon threads first
    import atexit

    atexit._run_exitfuncs()  # logging.shutdown and the like, in the normal exit's order
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            return  # e.g. EPIPE: the normal exit reports it and sets its exit code
    os._exit(code)
