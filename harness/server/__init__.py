"""Where PostgreSQL comes from (embedded, Docker or a URL) and what it reports."""
