"""The article: findings from stored runs, charts, prose, and the build of the page."""
