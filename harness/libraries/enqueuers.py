"""An enqueue kept open (a library's `enqueuer`): its client opened once, then a call per batch of jobs through it,
so that a soak's arrivals (harness.experiments.soak.library) send each job as it falls due, not in steps paced by
a connection's set-up."""

from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncContextManager, Awaitable, Callable, Iterator

Send = Callable[[int, int], None]  # send(n, first): n jobs, numbered from first where the library numbers them


@contextlib.contextmanager
def kept_open(opened: Callable[[], AsyncContextManager], send: Callable[..., Awaitable]) -> Iterator[Send]:
    """An asyncio library's: `opened()` enters its client, `send(client, n, first)` enqueues through it; one event
    loop for the enqueuer's life, the client closed with it."""
    with asyncio.Runner() as runner:
        stack = contextlib.AsyncExitStack()
        client = runner.run(stack.enter_async_context(opened()))
        try:
            yield lambda n, first: runner.run(send(client, n, first))
        finally:
            runner.run(stack.aclose())
