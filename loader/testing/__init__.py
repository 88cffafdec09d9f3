"""Testing support (SPEC §20): the settlement-flow projection, its normalization and YAML form, and
the transcript runner behind the pytest plugin.

`testing/` sits on `headless`. The syrupy extension (`loader.testing.extension`) and the pytest
plugin (`loader.testing.plugin`) are deliberately not re-exported: importing this package must not
import syrupy or pytest, so `dsh flow` works without the test extra.
"""

from __future__ import annotations

from loader.testing.flow import project
from loader.testing.normalize import dump_flow, normalize
from loader.testing.runner import Flow, TranscriptViolation, arun_flow

__all__ = ["Flow", "TranscriptViolation", "arun_flow", "dump_flow", "normalize", "project"]
