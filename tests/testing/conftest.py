"""Load the dsh plugin for these tests when the installed metadata does not register it yet.

The `pytest11` entry point `dsh` loads `loader.testing.plugin` under the name `dsh`; registering the
module a second time through `pytest_plugins` would make pluggy refuse it, so this only fills in
for an install made before the entry point existed. `pytester` drives the CI-guard tests.
"""

from __future__ import annotations

from importlib.metadata import entry_points

PLUGIN = "dsh.loader.testing.plugin"


def plugin_installed() -> bool:
    return any(ep.value == PLUGIN for ep in entry_points(group="pytest11"))


pytest_plugins = ["pytester"] if plugin_installed() else ["pytester", PLUGIN]
