"""What workflow code calls: the decorators and the context, waits, events and
streams, child runs, updates, attributes, session variables, progress,
``continue_as_new`` and the workflow logger.

Nothing here imports the engine: workflow code reaches the running engine
through :func:`starflow.workflow.context.running_engine`, typed by the
:class:`~starflow.workflow.context.RunningEngine` Protocol.
"""
