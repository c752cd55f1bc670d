"""A FastAPI app that queues jobs (docs/recipes.md includes this file).

    STALKD_ADDR=127.0.0.1:11300 uvicorn receipts_api:api
    stalkd worker receipts_api:tasks

The lifespan opens one ``AsyncClient`` when the app starts and closes it when the app stops;
every request's ``put`` goes through it without blocking the event loop (calls from
concurrent requests pipeline on the one connection). A shared client keeps one tube in use,
so it serves the tasks of one tube; give each tube its own client.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request

from stalkd.client import AsyncClient
from stalkd.worker import App

tasks = App(os.environ.get("STALKD_ADDR", "127.0.0.1:11300"))


@tasks.task(tube="receipts", ttr=60)
def send_receipt(payload: dict[str, int]) -> None:
    print(f"receipt for order {payload['order']}")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with AsyncClient(tasks.address) as queue:
        app.state.queue = queue
        yield


api = FastAPI(lifespan=lifespan)


@api.post("/orders/{order}/receipt", status_code=202)
async def queue_receipt(order: int, request: Request) -> dict[str, int]:
    queue: AsyncClient = request.app.state.queue
    job = await queue.put(send_receipt.encode({"order": order}), tube=send_receipt.tube,
                          priority=send_receipt.priority, ttr=send_receipt.ttr)
    return {"job": job}
