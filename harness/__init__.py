"""claimrace: race the ways a PostgreSQL job queue can claim a job."""

__version__ = "0.1.0"
