"""dsh installs as `dsh.cli` and `dsh.loader` only (issue 16 item 1; SPEC §26 item 5).

A user's project may have its own `loader/` and `cli/` packages: with dsh and its pytest plugin
installed, that project's own pytest must still import its own packages and pass.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_a_project_with_its_own_loader_and_cli_runs_its_pytest_with_dsh_installed(tmp_path: Path) -> None:
    project = tmp_path / "theirs"
    for package, value in (("loader", "their loader"), ("cli", "their cli")):
        (project / package).mkdir(parents=True)
        (project / package / "__init__.py").write_text(f"VALUE = {value!r}\n")
    (project / "loader" / "testing.py").write_text("HELPER = 'their testing'\n")
    (project / "tests").mkdir()
    (project / "tests" / "test_theirs.py").write_text(textwrap.dedent("""
        import cli
        import loader
        import loader.testing


        def test_their_packages_are_theirs():
            assert (loader.VALUE, cli.VALUE, loader.testing.HELPER) == ("their loader", "their cli", "their testing")


        def test_dsh_is_there_too(pytestconfig):
            import dsh.loader.testing

            assert pytestconfig.pluginmanager.hasplugin("dsh")
            assert dsh.loader.testing.__name__ == "dsh.loader.testing"
    """))

    result = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], project)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


def test_no_top_level_cli_or_loader_is_installed(tmp_path: Path) -> None:
    probe = ("import importlib.util as u; "
             "print([n for n in ('cli', 'loader') if u.find_spec(n)], u.find_spec('dsh.loader').name)")

    result = _run([sys.executable, "-c", probe], tmp_path)

    assert (result.returncode, result.stdout) == (0, "[] dsh.loader\n"), result.stderr


def test_the_package_list_names_every_package_folder() -> None:
    """setuptools' `packages` is written out by hand (the mapping needs it): a new subpackage that is
    missing from it would be left out of a wheel."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    folders = sorted(
        "dsh." + ".".join(init.parent.relative_to(ROOT).parts)
        for base in ("cli", "loader") for init in (ROOT / base).rglob("__init__.py")
    )
    shipped = [f"dsh.loader._shipped.{kind}" for kind in ("profiles", "overlays", "transcripts")]

    assert sorted(declared) == sorted(folders + shipped)
