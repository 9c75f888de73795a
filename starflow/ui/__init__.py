"""``starflow ui``: a web page to see and act on runs (the ``ui`` extra).

Build the app from an open :class:`~starflow.Starflow` and serve it with
uvicorn, or mount it in your own Starlette/FastAPI app::

    async with Starflow.open("sqlite:///starflow.db") as sf:
        app = create_app(sf, token="a-long-random-secret")
        await uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=8233)).serve()

Importing this package needs only starflow; :func:`create_app` needs the
``ui`` extra (``pip install 'starflow-durable[ui]'``).
"""

from __future__ import annotations

from .app import create_app

__all__ = ["create_app"]
