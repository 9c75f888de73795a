"""Find runs by what they are about: searchable attributes.

Workflow code calls ``starflow.set_attributes(customer=..., region=...)``;
``sf.list_runs(attributes={...})`` (or ``starflow runs list --attr k=v``)
finds the runs through an index, however many there are.

    python examples/find_by_attributes.py
"""

from __future__ import annotations

import os
import tempfile

import anyio

import starflow
from starflow import Starflow, workflow


@workflow(name="support-ticket")
async def ticket(customer: str, region: str, urgent: bool) -> str:
    starflow.set_attributes(customer=customer, region=region, urgent=urgent)
    await starflow.wait_for("resolved")
    return "closed"


async def main() -> None:
    url = os.environ.get("STARFLOW_DATABASE_URL") or \
        f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'tickets.db')}"
    async with Starflow.open(url) as sf:
        ids = {}
        for customer, region, urgent in (("c-42", "eu", True), ("c-7", "eu", False),
                                         ("c-42", "us", False)):
            ids[(customer, region)] = (await sf.run(ticket, customer, region, urgent)).run_id

        def names(runs: list[starflow.RunInfo]) -> list[tuple[str, str]]:
            by_id = {v: k for k, v in ids.items()}
            return sorted(by_id[r.id] for r in runs)

        print("customer c-42:", names(await sf.list_runs(attributes={"customer": "c-42"})))
        print("region eu:", names(await sf.list_runs(attributes={"region": "eu"})))
        print("urgent in eu:", names(await sf.list_runs(
            attributes={"region": "eu", "urgent": True})))


if __name__ == "__main__":
    anyio.run(main)
