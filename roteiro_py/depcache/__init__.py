"""The dependency cache (issue 12): dependencies built once per lockfile, reused by later lints."""
