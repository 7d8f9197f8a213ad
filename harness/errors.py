"""Errors a user can cause: the CLI prints them as one line and exits 2."""


class UserError(Exception):
    """Bad input or an unusable environment (not a bug: no traceback)."""


class RaceError(Exception):
    """A race could not complete (a worker crashed, a barrier broke)."""


class ConservationError(Exception):
    """A finished race broke an invariant that the audit must satisfy."""
