"""The claim service of the production experiment, its runners and its producer.

schema.py   the runs queue, its audit of status flips and its accepted finishes
queries.py  every statement the service runs, per protocol (none, lease, lease_fenced)
app.py      the HTTP API (Starlette + psycopg_pool)
process.py  the service as its own process on 127.0.0.1: start, wait for /health, stop, kill, restart
runner.py   runner processes that know the service only by its URL
producer.py open-loop arrivals: a Poisson rate plus bursts, each run's intended enqueue time kept
"""
