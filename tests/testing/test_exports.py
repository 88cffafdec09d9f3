"""`loader.testing` public surface (STYLE §2), and the promise that importing it needs no syrupy."""

from __future__ import annotations

import subprocess
import sys

import dsh.loader.testing

from dsh import loader


def test_testing_exports_exactly_the_pinned_names() -> None:
    assert sorted(loader.testing.__all__) == sorted(
        ["Flow", "FlowPlan", "FlowsDiffer", "TranscriptViolation", "arun_flow", "arun_flows", "check_repeats",
         "dump_flow", "flow_diff", "normalize", "plan_flow", "project"]
    )
    assert all(hasattr(loader.testing, name) for name in loader.testing.__all__)


def test_importing_the_package_or_the_plugin_imports_neither_syrupy_nor_the_runtime() -> None:
    code = (
        "import sys, loader.testing, loader.testing.plugin; "
        "print(sorted(m for m in ('syrupy', 'dsh.loader.headless') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
