"""The `dsh` command line (Typer). Heavy imports happen inside commands, never at module level."""

__version__ = "0.1.0"  # the package version: pyproject.toml reads it from here (setuptools `dynamic`)
