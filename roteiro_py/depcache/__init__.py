"""The dependency cache (issue 12): the build output of a workspace's pinned dependencies,
built once per lockfile in a VM that runs none of the tree's own code, and reused by later
lints so they compile only the workspace's members. `skeleton` makes the stand-in workspace
that VM builds (the tree's manifests written back from their values, its lockfile, its
cargo configuration's profiles, every target a stub) and the key the cache is stored
under; `store` keeps one sealed disk image per key under $ROTEIRO_HOME/cache/deps.
lint/dep_cache.py decides, per run, to use, build or skip it.
"""
