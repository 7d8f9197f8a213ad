"""`python -m harness.report`: the entry point `make report` calls (see harness/article/build.py)."""

from harness.article.build import main

if __name__ == "__main__":
    raise SystemExit(main())
