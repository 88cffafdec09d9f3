"""Issue 15 item 7 (accepted but questionable): infinite durations, an infinite shutdown grace and
`--profile ""` are refused with a located line and exit 2, through the real `dsh` command.
(`--resume` of a missing id is left to the helper who owns `cli/run.py`.)
"""

from __future__ import annotations

import pytest

FLOAT_KEYS = [
    ("model", "connectTimeoutSeconds"),
    ("model", "readTimeoutSeconds"),
    ("model.retry", "initialBackoffSeconds"),
    ("model.retry", "maxBackoffSeconds"),
    ("run", "shutdownGraceSeconds"),
]


def _overlay(path, section: str, key: str, value: str):
    lines, indent = [], 0
    for part in section.split("."):
        lines.append("  " * indent + f"{part}:")
        indent += 1
    lines.append("  " * indent + f"{key}: {value}")
    path.write_text("\n".join(lines) + "\n")
    return path, len(lines), 2 * indent + 1


@pytest.mark.parametrize(("section", "key"), FLOAT_KEYS, ids=[k for _, k in FLOAT_KEYS])
@pytest.mark.parametrize("value", [".inf", ".nan", "-.inf"])
def test_an_infinite_or_nan_duration_is_refused_at_its_key(dsh, tmp_path, section, key, value):
    path, line, col = _overlay(tmp_path / "inf.yaml", section, key, value)

    result = dsh("config", "show", "--overlay", path)

    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith(f"dsh: {path}:{line}:{col}: {section}.{key}: ")
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1


def test_a_shutdown_grace_beyond_an_hour_is_refused(dsh, tmp_path):
    path, line, col = _overlay(tmp_path / "grace.yaml", "run", "shutdownGraceSeconds", "1e300")

    result = dsh("config", "show", "--overlay", path)

    assert result.exit_code == 2
    assert result.stderr == (
        f"dsh: {path}:{line}:{col}: run.shutdownGraceSeconds: Input should be less than or equal to 3600\n"
    )


def test_an_infinite_grace_from_the_environment_is_refused(dsh):
    result = dsh("config", "show", env={"DSH_RUN__SHUTDOWN_GRACE_SECONDS": "inf"})

    assert result.exit_code == 2
    assert result.stderr == (
        "dsh: environment DSH_RUN__SHUTDOWN_GRACE_SECONDS: run.shutdownGraceSeconds: Input should be a finite number\n"
    )


@pytest.mark.parametrize("argv", [["config", "show"], ["run", "task"]], ids=["config-show", "run"])
@pytest.mark.parametrize("value", ["", "  "], ids=["empty", "blank"])
def test_an_empty_profile_is_refused_not_silently_the_default(dsh, home, argv, value):
    result = dsh(*argv, "--profile", value, "--home", home) if argv[0] == "run" else dsh(*argv, "--profile", value)

    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == "dsh: --profile: give a profile name or path, not an empty string\n"
    assert not home.exists()
