"""``starflow.progress``: step progress telemetry, warm tier only.

Runtime layer: it reads the running step from the context and hands the value
to the warm tier through the mirror.
"""

from __future__ import annotations

from typing import Any

from .. import serde
from ..errors import StarflowError, WarmTierError
from ..logs import get_logger
from .context import current_engine, current_node

__all__ = ["progress"]

log = get_logger("starflow.warm")


async def progress(data: Any) -> None:
    """Report the running step's progress to the warm tier (``sf.watch`` shows it).

    High-volume and best-effort, as the state model says: it never reaches the
    cold tier, is not replayed, and is dropped (with a debug log) when no warm
    tier is configured or it is unreachable. Wake tokens are redacted.

    Args:
        data: Any JSON-encodable value; the latest one per step is kept.

    Raises:
        StarflowError: called outside a ``@step`` running in a workflow.
        SerializationError: ``data`` is not JSON-encodable.
    """
    engine = current_engine.get()
    node_id = current_node.get()
    if engine is None or node_id is None:
        raise StarflowError(
            "starflow.progress() reports a step's progress: call it inside a @step that a "
            "workflow run is executing")
    from ..warm.mirror import find_mirror

    value = serde.to_builtins(data, what="progress data", run_id=engine.run_id, node_id=node_id)
    mirror = find_mirror(engine.adapter)
    if mirror is None:
        return
    try:
        await mirror.warm.put_progress(engine.run_id, node_id, value)
    except WarmTierError as exc:
        log.debug("progress dropped: warm tier unavailable", run_id=engine.run_id,
                  node_id=node_id, error=str(exc))
