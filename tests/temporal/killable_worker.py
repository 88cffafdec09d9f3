"""`dsh worker` for a test that SIGKILLs it: `python killable_worker.py worker [flags]`.

A workflow task goes first to the sticky queue of the worker that ran the workflow's last task, and
the server does not know that worker is dead: the task waits out the sticky schedule-to-start
timeout (the SDK's 10 s) before it goes to the workflow's own queue, where the next worker takes it
and replays the history. That wait was ~10 s of each fault test. Here the worker asks for
`STICKY_SECONDS`: the same path (timeout, then the normal queue), taken sooner. A live worker that
misses it under load only replays from history, which the fault tests' second worker does anyway.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio.worker import Worker

from dsh.cli.main import entry
from dsh.loader.engines import worker

STICKY_SECONDS = 1.0


class KillableWorker(Worker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("sticky_queue_schedule_to_start_timeout", timedelta(seconds=STICKY_SECONDS))
        super().__init__(*args, **kwargs)


if __name__ == "__main__":
    worker.Worker = KillableWorker  # type: ignore[misc]  # make_worker builds this one
    entry()
