"""How every command of the harness ends: a user's error is one line on stderr and exit 2, bugs keep their
traceback (python -m harness, python -m harness.report)."""

from __future__ import annotations

import argparse
import os
import sys

from harness.errors import UserError


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit 2."""

    def error(self, message: str):
        raise UserError(f"{self.prog}: {message}")


def run_command(command) -> int:
    """Run an entry point: a user's error is one line and exit 2; bugs keep their traceback."""
    try:
        return command()
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader (head, less) went away: stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
