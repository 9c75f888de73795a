"""``starflow.logger``: a logger for workflow code that stays quiet while a run replays.

A run's workflow function runs again from the top on every wake, takeover
or resume, and replays its recorded history up to where it left off: a plain
``logging`` call in workflow code would repeat once per replay. This logger
(a :class:`logging.LoggerAdapter` over the stdlib logger ``starflow.workflow``)
drops a record while the run is replaying recorded history and emits it once
the run executes new code (Temporal's ``workflow.logger`` does the same). Each
record carries ``run_id``, ``workflow`` and ``node_id`` (the step being run,
else the latest node the workflow reached) as attributes, so a formatter can
show them. Outside a run it logs like any logger.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

from .context import current_engine, current_node

__all__ = ["WorkflowLogger", "is_replaying", "logger"]

#: The stdlib logger behind :data:`logger` (configure its level and handlers as usual).
LOGGER_NAME = "starflow.workflow"


def is_replaying() -> bool:
    """Whether the current workflow code is replaying recorded history.

    True while recorded nodes lie ahead of the code (the run has already
    executed this code before); False once it reaches code it has not run
    before, and outside a run.
    """
    engine = current_engine.get()
    return engine is not None and engine.replaying


class WorkflowLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The type of :data:`starflow.logger` (see the module docstring)."""

    def isEnabledFor(self, level: int) -> bool:
        if is_replaying():
            return False
        enabled: bool = self.logger.isEnabledFor(level)
        return enabled

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]
                ) -> tuple[Any, MutableMapping[str, Any]]:
        engine = current_engine.get()
        if engine is None:
            return msg, kwargs
        fields = {"run_id": engine.run_id, "workflow": engine.ctx.workflow,
                  "node_id": current_node.get() or engine.position}
        extra = kwargs.get("extra")
        kwargs["extra"] = {**fields, **extra} if extra else fields
        return msg, kwargs


#: The logger for workflow code: ``starflow.logger.info("charged %s", order_id)``.
logger = WorkflowLogger(logging.getLogger(LOGGER_NAME), {})
