#!/usr/bin/env bash
# The action's step after "Restore the dependency caches" (action.yml), run when it
# restored them: `$ROTEIRO_HOME/ci-cache/deps-packed/deps.tar` (pack-deps.sh's archive)
# extracted into `$ROTEIRO_HOME/cache/deps` with the caches' holes, then deleted
# (ci/common.sh unpack_deps). A lint checks each cache against its sealed record before
# using it, as it checks any.
#
# Nothing reaches this script from an input.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=ci/common.sh
source "$here/../common.sh"
CI_KIND=github

home="${ROTEIRO_HOME:-$HOME/.roteiro}"
unpack_deps "$home/ci-cache/deps-packed" "$home/cache/deps"
