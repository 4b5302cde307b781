"""The host side of cargo: everything here reads the tree (and what registries and git
hosts send) as untrusted data, and nothing here runs cargo or hands a tree file to a tool.

- `workspace`: the tree's lockfile and manifests, read bounded.
- `lockfile`: the pins a lockfile holds, checked (https only, checksums, full commit ids).
- `store`: the content-addressed package store under $ROTEIRO_HOME/packages.
- `registry`, `git`: fetching a pin into the store (a registry's `dl`, hardened git).
- `fetch`: `fetch-deps`, the lockfile's pins into the store.
- `vendor`: the guest's only view of dependencies, a vendored directory source per lockfile.
"""
