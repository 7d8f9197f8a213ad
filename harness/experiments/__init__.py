"""One module per kind of experiment; each measures on a real server and stores its runs."""
