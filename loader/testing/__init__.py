"""Testing support (SPEC §20): the settlement-flow projection, its normalization and YAML form, and
the transcript runner behind the pytest plugin.

`testing/` sits on `headless`. The syrupy extension (`loader.testing.extension`) and the pytest
plugin (`loader.testing.plugin`) are deliberately not re-exported: importing this package must not
import syrupy or pytest, so `dsh flow` works without the test extra.
"""

from __future__ import annotations

from dsh.loader.testing.flow import project
from dsh.loader.testing.normalize import dump_flow, normalize
from dsh.loader.testing.runner import (
    Flow,
    FlowPlan,
    FlowsDiffer,
    TranscriptViolation,
    arun_flow,
    arun_flows,
    check_repeats,
    flow_diff,
    plan_flow,
)

__all__ = [
    "Flow",
    "FlowPlan",
    "FlowsDiffer",
    "TranscriptViolation",
    "arun_flow",
    "arun_flows",
    "check_repeats",
    "dump_flow",
    "flow_diff",
    "normalize",
    "plan_flow",
    "project",
]
