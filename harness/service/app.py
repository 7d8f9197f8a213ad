"""The claim service: a Starlette app over a psycopg connection pool, the way the original's runners see it.

    GET  /health                   200 {"ok": true, "protocol": ..., "lease_s": ...}
    GET  /pending                  up to 5 pending runs, oldest first, nothing reserved, secrets decrypted
    POST /runs/{id}/claim          {"runner"} -> 200 {"run", "token"} | 409 another runner won
    POST /claim                    {"runner"} -> 200 {"run", "token"} | 204 nothing pending (SKIP LOCKED pick)
                                   {"runner", "batch": k} -> 200 {"runs": [{"run", "token"}, ...]} (up to k
                                   runs, one statement) | 204
    POST /runs/{id}/heartbeat      {"runner", "token"} -> 200 | 409
    POST /runs/{id}/finish         {"runner", "token"} -> 200 | 409

A malformed id or body gets a 4xx with a one-line reason, never a 500. Every
statement is in harness.service.queries; the pool's connections carry the
application name `claimrace-service`.

For the faults experiment the service can hold one request open inside its
window (AnswerHold, `--hold-dir`): a claim after it committed and before its
answer, or a finish inside its open transaction, so a fault can land there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from pathlib import Path

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from harness.service import cipher
from harness.service.queries import MAX_CLAIM_BATCH, check_protocol, queries_for

APPLICATION_NAME = "claimrace-service"
MAX_RUNNER_NAME = 200
MAX_BODY_BYTES = 4096
MAX_ID = 2**63 - 1
MAX_TOKEN = 2**31 - 1
DEFAULT_POOL_SIZE = 8
MAX_POOL_SIZE = 100


class BadRequest(Exception):
    """A request the service refuses with a 4xx and one line."""

    def __init__(self, reason: str, status: int = 400):
        super().__init__(reason)
        self.status = status


def _refuse(reason: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": reason.splitlines()[0]}, status_code=status)


def _run_id(request: Request) -> int:
    text = request.path_params["run_id"]
    if not text.isascii() or not text.isdigit() or len(text) > 19 or not 1 <= int(text) <= MAX_ID:
        raise BadRequest(f"a run id is a whole number from 1 to {MAX_ID}, not {text[:40]!r}", 404)
    return int(text)


async def _body(request: Request, token: bool, batch: bool = False) -> dict:
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        raise BadRequest(f"the body is larger than {MAX_BODY_BYTES} bytes", 413)
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    runner = body.get("runner")
    if not isinstance(runner, str) or not 1 <= len(runner) <= MAX_RUNNER_NAME:
        raise BadRequest(f"runner must be a string of 1 to {MAX_RUNNER_NAME} characters")
    given = {"runner": runner}
    if token:
        value = body.get("token")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKEN:
            raise BadRequest(f"token must be a whole number from 0 to {MAX_TOKEN}")
        given["token"] = value
    if batch and "batch" in body:
        value = body["batch"]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CLAIM_BATCH:
            raise BadRequest(f"batch must be a whole number from 1 to {MAX_CLAIM_BATCH}")
        given["batch"] = value
    return given


HOLD_S = 5.0  # the longest a request is held: within the runners' request timeout, so the hold alone fails nothing


class AnswerHold:
    """Fault injection points, off unless a folder is given. The harness arms one by creating `arm-<place>` in
    the folder (place: claim or finish); the next such request, once its statement ran (a claim committed; a
    finish inside its still open transaction), removes the arm, writes `held-<place>` (JSON: run, runner,
    unix) and waits until the harness creates `release-<place>` (or HOLD_S) before it answers (claim) or
    commits (finish)."""

    def __init__(self, folder: str | None):
        self.folder = Path(folder) if folder else None

    def armed(self, place: str) -> bool:
        if self.folder is None:
            return False
        try:
            (self.folder / f"arm-{place}").unlink()  # one request takes the arm, however many are in flight
        except FileNotFoundError:
            return False
        return True

    async def hold(self, place: str, run: int, runner: str) -> None:
        held = self.folder / f"held-{place}"
        held.with_suffix(".tmp").write_text(json.dumps({"run": run, "runner": runner, "unix": time.time()}))
        held.with_suffix(".tmp").replace(held)
        release = self.folder / f"release-{place}"
        deadline = time.monotonic() + HOLD_S
        while not release.exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)


def create_app(dsn: str, protocol: str = "none", lease_s: float = 30.0, pool_size: int = DEFAULT_POOL_SIZE,
               key: bytes | None = None, hold_dir: str | None = None) -> Starlette:
    """The service for one database and protocol; key decrypts the runs' secrets (default: from the environment)."""
    check_protocol(protocol, lease_s)
    if not 1 <= pool_size <= MAX_POOL_SIZE:
        raise ValueError(f"pool size must be between 1 and {MAX_POOL_SIZE}, not {pool_size}")
    key = key if key is not None else os.environ.get(cipher.KEY_ENVIRONMENT, "").encode()
    if not key:
        raise ValueError(f"the service needs the secrets key (argument or {cipher.KEY_ENVIRONMENT})")
    queries = queries_for(protocol)
    lease_s = float(lease_s)
    holds = AnswerHold(hold_dir)
    pool = AsyncConnectionPool(dsn, min_size=pool_size, max_size=pool_size, open=False,
                               kwargs={"autocommit": True, "application_name": APPLICATION_NAME,
                                       "row_factory": dict_row})

    def shown(row: dict) -> dict:
        return {"id": row["id"], "status": row["status"], "spec": row["spec"],
                "secrets": cipher.decrypt(key, row["secrets"]), "enqueued_at": row["enqueued_at"].isoformat(),
                "claimed_at": row["claimed_at"].isoformat() if row["claimed_at"] else None,
                "claimed_by": row["claimed_by"], "attempt": row["attempt"]}

    async def one(statement: str, params: dict | None = None) -> dict | None:
        async with pool.connection() as conn:
            cursor = await conn.execute(statement, params)
            return await cursor.fetchone()

    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True, "protocol": protocol, "lease_s": lease_s})

    async def pending(request: Request) -> Response:
        async with pool.connection() as conn:
            rows = await (await conn.execute(queries.pending)).fetchall()
        return JSONResponse({"runs": [shown(row) for row in rows]})

    def claimed(row: dict | None, empty_status: int) -> Response:
        if row is None:
            return Response(status_code=204) if empty_status == 204 else _refuse("another runner holds this run or "
                                                                                  "it is not pending", 409)
        return JSONResponse({"run": shown(row), "token": row["attempt"]})

    async def claim_by_id(request: Request) -> Response:
        run_id = _run_id(request)
        body = await _body(request, token=False)
        return claimed(await one(queries.claim_by_id, {"id": run_id, "runner": body["runner"], "lease_s": lease_s}),
                       409)

    async def claim_next(request: Request) -> Response:
        body = await _body(request, token=False, batch=True)
        if "batch" in body:  # up to k runs in one statement, each with its own token
            async with pool.connection() as conn:
                rows = await (await conn.execute(queries.claim_next_for(body["batch"]),
                                                 {"runner": body["runner"], "lease_s": lease_s})).fetchall()
            if not rows:
                return Response(status_code=204)
            rows.sort(key=lambda row: row["id"])
            return JSONResponse({"runs": [{"run": shown(row), "token": row["attempt"]} for row in rows]})
        row = await one(queries.claim_next, {"runner": body["runner"], "lease_s": lease_s})
        if row is not None and holds.armed("claim"):
            await holds.hold("claim", row["id"], body["runner"])  # committed, not yet answered
        return claimed(row, 204)

    async def heartbeat(request: Request) -> Response:
        run_id = _run_id(request)
        body = await _body(request, token=True)
        row = await one(queries.heartbeat, {"id": run_id, **body, "lease_s": lease_s})
        return JSONResponse({"ok": True}) if row else _refuse("this runner does not hold this run", 409)

    async def finish(request: Request) -> Response:
        run_id = _run_id(request)
        body = await _body(request, token=True)
        params = {"id": run_id, **body}
        if holds.armed("finish"):
            async with pool.connection() as conn, conn.transaction():
                row = await (await conn.execute(queries.finish, params)).fetchone()
                await holds.hold("finish", run_id, body["runner"])  # written, not yet committed
        else:
            row = await one(queries.finish, params)
        return JSONResponse({"ok": True}) if row else _refuse("the run is not running under this claim", 409)

    def refusing(endpoint):
        async def guarded(request: Request) -> Response:
            try:
                return await endpoint(request)
            except BadRequest as exc:
                return _refuse(str(exc), exc.status)
        return guarded

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await pool.open(wait=True, timeout=30)
        try:
            yield
        finally:
            await pool.close()

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/pending", pending, methods=["GET"]),
        Route("/claim", refusing(claim_next), methods=["POST"]),
        Route("/runs/{run_id}/claim", refusing(claim_by_id), methods=["POST"]),
        Route("/runs/{run_id}/heartbeat", refusing(heartbeat), methods=["POST"]),
        Route("/runs/{run_id}/finish", refusing(finish), methods=["POST"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.pool = pool
    return app
