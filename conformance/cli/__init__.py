"""The `conformance` command: `main` parses, each subcommand lives in `commands/<name>.py`."""
