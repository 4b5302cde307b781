#!/usr/bin/env bash
# The action's step before "Save the dependency caches" (action.yml), run when that save
# runs: `$ROTEIRO_HOME/cache/deps` archived with its holes kept into
# `$ROTEIRO_HOME/ci-cache/deps-packed/deps.tar`, the directory actions/cache saves instead
# of cache/deps, whose tar would write every cache's holes out (ci/common.sh pack_deps
# says why and what it never reads). unpack-deps.sh undoes it after the restore.
#
# Nothing reaches this script from an input.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=ci/common.sh
source "$here/../common.sh"
CI_KIND=github

home="${ROTEIRO_HOME:-$HOME/.roteiro}"
pack_deps "$home/cache/deps" "$home/ci-cache/deps-packed"
