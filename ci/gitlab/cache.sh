#!/usr/bin/env bash
# The GitLab template's cache step: `cache.sh restore` (before_script) and `cache.sh
# save` (after_script, which runs whether the lint passed or not, before GitLab archives
# the cache).
#
# GitLab caches only paths inside the project directory, and the project directory is
# the tree a lint copies into its VM: a multi-GiB image store there would be copied with
# it (or refused by [vm] stage_max_mib). So the cached parts live in the project only
# between jobs, under PYLINT_SANDBOX_CACHE (default .pylint-sandbox-cache): `restore`
# moves each one to where the tool reads it (under ROTEIRO_HOME and CARGO_HOME, outside
# the project) before anything reads the tree, and `save` moves it back for GitLab to
# archive. A move within one filesystem is a rename: the template puts ROTEIRO_HOME beside
# the project directory.
#
# The tree cannot plant a cache: `restore` refuses (exit 3, nothing moved) when git
# tracks anything under the cache directory, or when it is a link. What is left there is
# what GitLab extracted from a cache a job of this project saved (GitLab keeps protected
# branches' caches apart from the others'), and it is checked like any local cache:
# image blobs by digest, root filesystems and dependency caches by their recorded
# identity (SANDBOXED_LINTING.md says what that does and does not prove).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=ci/common.sh
source "$here/../common.sh"
CI_KIND=gitlab

: "${CI_PROJECT_DIR:?a GitLab job sets CI_PROJECT_DIR}"
cd "$CI_PROJECT_DIR"
name="${PYLINT_SANDBOX_CACHE:-.pylint-sandbox-cache}"
case "$name" in
  "" | /* | *..* | .) ci_error "PYLINT_SANDBOX_CACHE=${name@Q} is not a directory name inside the project"; exit 2 ;;
esac
cache="$CI_PROJECT_DIR/$name"
home="${ROTEIRO_HOME:-$HOME/.roteiro}"
cargo="${CARGO_HOME:-$HOME/.cargo}"

# Each part: its place in the cache directory, and where the tool reads it.
parts=(
  "roteiro/store|$home/store"
  "roteiro/vm|$home/vm"
  "roteiro/cache/rootfs|$home/cache/rootfs"
  "roteiro/cache/deps|$home/cache/deps"
  "cargo/registry|$cargo/registry"
  "cargo/git|$cargo/git"
)

tracked() {
  [ -n "$(git ls-files -- "$name" 2>/dev/null | head -n 1)" ]
}

case "${1:-}" in
  restore)
    if tracked || [ -L "$cache" ]; then
      ci_error "the repository itself has $name/ (tracked by git, or a link): a cache the tree chose is never used; rename it or set PYLINT_SANDBOX_CACHE"
      exit 3
    fi
    for part in "${parts[@]}"; do
      from="$cache/${part%%|*}" to="${part#*|}"
      if [ ! -d "$from" ] || [ -L "$from" ]; then continue; fi
      if [ -e "$to" ] || [ -L "$to" ]; then
        # This runner kept its own (a shell executor): that one is current, and the
        # archived copy must not stay in the tree the lint copies.
        rm -rf -- "$from"
        continue
      fi
      mkdir -p -- "$(dirname -- "$to")"
      mv -- "$from" "$to"
      ci_note "restored ${part%%|*} from the cache"
    done
    ;;
  save)
    if tracked || [ -L "$cache" ]; then
      ci_note "not saving the cache into $name/: the repository has it"
      exit 0
    fi
    for part in "${parts[@]}"; do
      to="$cache/${part%%|*}" from="${part#*|}"
      if [ ! -d "$from" ] || [ -L "$from" ]; then continue; fi
      rm -rf -- "$to"
      mkdir -p -- "$(dirname -- "$to")"
      mv -- "$from" "$to"
    done
    ;;
  *)
    ci_error "usage: cache.sh restore|save"
    exit 2
    ;;
esac
