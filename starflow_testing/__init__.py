"""starflow_testing: test workflows on fake time, with faults and replays.

- :class:`WorkflowEnvironment`: a Starflow application on a :class:`FakeClock`
  with an embedded worker, the sweep and timers, and automatic time skipping.
- :class:`FakeClock`: the :class:`starflow.Clock` tests move by hand.
- :class:`FaultInjectingAdapter`: fail or hang the N-th call of any adapter method.
- :class:`Replayer`: replay recorded histories against the current code.
- :func:`capture_logs`: assert on starflow's structlog events.
- :class:`~starflow.errors.RunnerKilled`: what the caller driving a run sees
  after :meth:`WorkflowEnvironment.kill_runner`.
- The pytest plugin (``starflow_testing.pytest_plugin``, loaded automatically):
  fixtures ``starflow_env`` and ``fake_clock``.
"""

from __future__ import annotations

from starflow.admin.history import RunHistory, export_run, load_history, read_history
from starflow.admin.replayer import Replayer, ReplayResult
from starflow.errors import RunnerKilled

from .clock import FakeClock
from .environment import WorkflowEnvironment
from .faults import FaultInjectingAdapter
from .logs import capture_logs

__all__ = [
    "FakeClock",
    "FaultInjectingAdapter",
    "ReplayResult",
    "Replayer",
    "RunHistory",
    "RunnerKilled",
    "WorkflowEnvironment",
    "capture_logs",
    "export_run",
    "load_history",
    "read_history",
]
