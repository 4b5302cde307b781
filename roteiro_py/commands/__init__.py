"""The core of each CLI verb: one typed function per command, no Typer (cli/app.py parses
and maps the result to an exit code)."""
