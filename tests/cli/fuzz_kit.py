"""Shared pieces of the hypothesis fuzz tests (issue 15 item 7): the settings profiles, the
invariants every surface checks, and strategies for hostile text.

Profiles, picked by `HYPOTHESIS_PROFILE` (default `ci`):
- `ci`: 300 examples per surface, no example database (nothing is written into the checkout);
- `fuzz`: 10,000 examples per surface, for `scripts/fuzz.sh`.
Both use a 30 s deadline per example as a hang backstop, not a performance figure: a refusal takes
milliseconds (measured by `scripts/fuzz.sh`), the old alias bomb ran for minutes, and a loaded 2-core
runner must not turn a slow-but-bounded example into a failure.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

_COMMON = dict(
    deadline=timedelta(seconds=30),
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("ci", max_examples=300, **_COMMON)
settings.register_profile("fuzz", max_examples=10_000, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

TRACEBACK = "Traceback (most recent call last)"


def tree_digest(root: Path) -> dict[str, str]:
    """Path -> sha256 (or the link target, or `dir`) of everything under `root`."""
    out: dict[str, str] = {}
    if not os.path.lexists(root):
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            out[os.path.relpath(os.path.join(dirpath, name), root)] = "dir"
        for name in filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                out[rel] = "link:" + os.readlink(path)
            elif os.path.isfile(path):
                with open(path, "rb") as f:
                    out[rel] = hashlib.sha256(f.read()).hexdigest()
            else:
                out[rel] = "special"
    return out


def check_cli_result(result, allowed: Iterable[int]) -> None:
    """The invariants of a command run in-process: a documented exit code, no traceback on either
    stream, and no exception other than the exit itself."""
    assert result.exit_code in set(allowed), (result.exit_code, result.stdout[-500:], result.stderr[-500:])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert TRACEBACK not in result.stdout and TRACEBACK not in result.stderr
    if result.exit_code != 0:
        # Ours are `dsh: ...`; click's usage errors (an argument that looks like an option) are
        # exit 2 with its own `Usage:` block, which §17.3 counts as a usage error too.
        assert result.stderr.startswith(("dsh: ", "Usage: ")), result.stderr[:500]


# -- hostile text ----------------------------------------------------------------------------------
_YAML_FRAGMENTS = [
    "model:", "  ", "\n", "run:", "agent:", "subagents:", "persistence:", "testing:", "retry:",
    "maxTokens:", "baseUrl:", "shutdownGraceSeconds:", "readTimeoutSeconds:", "maxDepth:", " ",
    "&a ", "*a", "&b [*a, *a]", "<<: *a", "!foo ", "!!str ", "!!python/object:os.system ", "? ",
    "- ", "[", "]", "{", "}", ",", ":", "'", '"', "#", "|", ">", "---", "...", "%YAML 1.1",
    ".inf", "-.inf", ".nan", "1e999", "0x1F", "0o17", "~", "null", "true", "yes", "2001-12-14",
    "9" * 70, "9" * 5000, "[" * 100, "]" * 100, "{a: " * 80, "}" * 80, "\t", "\r", "\x00", "\ufeff",
    "\u2028", "é", "😀", "\x85", "\\", "@", "`",
]

_HOSTILE_VALUES = st.one_of(
    st.sampled_from(["&a [1, 2]", "*a", "!foo x", "!!str x", "!!binary aGk=", ".inf", ".nan", "1e999", "~", "[]", "{}",
                     "&a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]"]),
    st.one_of(st.sampled_from([64, 65, 4300, 4301, 6000]), st.integers(1, 6000)).map(lambda n: "9" * n),
    st.one_of(st.sampled_from([63, 64, 65, 150, 400]), st.integers(1, 400)).map(lambda n: "[" * n + "]" * n),
    st.one_of(st.sampled_from([64, 65, 150, 300]), st.integers(1, 300)).map(lambda n: "{a: " * n + "1" + "}" * n),
)
_KEY_PREFIXES = st.sampled_from(["", "model:\n  maxTokens: ", "run:\n  shutdownGraceSeconds: ", "agents: ",
                                 "model: ", "x: ", "- ", "task: ", "agents:\n  root:\n    replies: "])

yaml_targeted = st.tuples(_KEY_PREFIXES, _HOSTILE_VALUES).map(lambda t: t[0] + t[1] + "\n")
"""A schema-shaped key with one hostile value: the inputs that used to end in a traceback."""

yaml_text = st.one_of(
    yaml_targeted,
    st.lists(st.sampled_from(_YAML_FRAGMENTS), max_size=40).map("".join),
    st.text(max_size=300),
    st.integers(1, 400).map(lambda n: "a: " + "[" * n + "]" * n + "\n"),
    st.integers(1, 200).map(lambda n: "".join("  " * i + f"k{i}:\n" for i in range(n)) + "  " * n + "x: 1\n"),
)
yaml_bytes = st.one_of(yaml_targeted.map(str.encode), yaml_text.map(lambda s: s.encode("utf-8", "surrogatepass")), st.binary(max_size=300))

surrogate = st.integers(0xD800, 0xDFFF).map(chr)
any_text = st.one_of(
    st.text(max_size=60),
    st.lists(st.one_of(st.characters(), surrogate), max_size=30).map("".join),
)


# -- a runner that builds the click command once ---------------------------------------------------
# typer's CliRunner rebuilds the whole click command tree from the app on every invoke (~70 ms here),
# which would dominate a 300-example budget. The command built once is the same object typer would
# build; only the rebuilding is skipped.
import typer.main  # noqa: E402
import typer.testing  # noqa: E402

from dsh.cli.main import app  # noqa: E402

_COMMAND = typer.main.get_command(app)


class FastRunner(typer.testing.CliRunner):
    def invoke(self, app_, *args, **kwargs):  # type: ignore[no-untyped-def]
        build = typer.testing._get_command
        typer.testing._get_command = lambda _app: _COMMAND
        try:
            return super().invoke(app_, *args, **kwargs)
        finally:
            typer.testing._get_command = build


def fast_dsh():
    """`dsh(*args, env=...)` like the `dsh` fixture, on the cached command."""
    from cli_kit import clean_env

    runner = FastRunner()

    def invoke(*argv, env=None):  # type: ignore[no-untyped-def]
        return runner.invoke(app, [str(a) for a in argv], env=clean_env(env))

    return invoke
