"""Compatibility: the :class:`~starflow.replayer.Replayer` is product code in
:mod:`starflow.replayer` (``starflow replay`` uses it); this module and
``starflow_testing`` re-export it."""

from __future__ import annotations

from starflow.replayer import Replayer, ReplayResult

__all__ = ["ReplayResult", "Replayer"]
