"""The syrupy extension that stores one settlement flow per file (SPEC §20.3).

One file per snapshot (`__snapshots__/<test file>/<test name>.flow.yaml`) so a reviewer reads a
flow as the YAML it is, and a diff shows exactly which step, queue or notice moved. The only module
of `loader.testing` that imports syrupy at import time: the rest of the package (and `dsh flow`)
must work where syrupy is not installed.
"""

from __future__ import annotations

from typing import Any

from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from dsh.loader.testing.normalize import dump_flow

__all__ = ["FlowYamlExtension"]


class FlowYamlExtension(SingleFileSnapshotExtension):
    _write_mode = WriteMode.TEXT
    file_extension = "flow.yaml"

    def serialize(self, data: Any, **_filters: Any) -> str:
        """The §20.2 dump of a normalized flow (a `Flow` or its dict).

        syrupy always passes `exclude`, `include` and `matcher` (a composed matcher even when the
        test gave none); they are ignored because a flow is already the stable, filtered view."""
        return dump_flow(data)
