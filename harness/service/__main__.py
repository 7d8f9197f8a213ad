"""python -m harness.service: serve the claim API on 127.0.0.1 (the harness starts it; see process.py).

Prints `listening PORT` once its socket is bound, then serves until SIGTERM.
The secrets key comes from the environment (CLAIMRACE_SECRETS_KEY).
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys

from harness.errors import UserError
from harness.children import die_with_parent





def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart takes the same port back at once
    sock.bind((host, port))
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.service", description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", required=True, help="the database the service claims from")
    parser.add_argument("--protocol", default="none", help="none, lease or lease_fenced")
    parser.add_argument("--lease-s", type=float, default=30.0)
    parser.add_argument("--pool-size", type=int, default=8)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    parser.add_argument("--parent-pid", type=int, default=None, help="die with this process (the harness)")
    parser.add_argument("--hold-dir", default=None, help="fault injection: the folder of AnswerHold's arms")
    args = parser.parse_args(argv)
    if args.parent_pid is not None:
        die_with_parent(args.parent_pid)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the harness stops it, after the run it serves

    import uvicorn

    from harness.service.app import create_app

    try:
        app = create_app(args.dsn, args.protocol, args.lease_s, args.pool_size, hold_dir=args.hold_dir)
    except (UserError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not 0 <= args.port <= 65535:
        print(f"error: port must be between 0 and 65535, not {args.port}", file=sys.stderr)
        return 2
    try:
        sock = _bind(args.host, args.port)
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"listening {sock.getsockname()[1]}", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                                           timeout_graceful_shutdown=2))
    server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
