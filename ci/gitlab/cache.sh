#!/usr/bin/env bash
# The GitLab template's cache step: `cache.sh restore` (before_script) and `cache.sh
# save` (after_script, which runs whether the lint passed or not, before GitLab archives
# the cache).
#
# GitLab caches only paths inside the project directory, and the project directory is
# the tree a lint copies into its VM: a multi-GiB image store there would be copied with
# it (or refused by [vm] stage_max_mib). So the cached parts live in the project only
# between jobs, under PYLINT_SANDBOX_CACHE (default .pylint-sandbox-cache): `restore`
# moves each one to where the tool reads it (under ROTEIRO_HOME, outside the project) before anything reads the tree, and `save` moves it back for GitLab to
# archive. A move within one filesystem is a rename: the template puts ROTEIRO_HOME beside
# the project directory.
#
# The tree cannot plant a cache: `restore` refuses (exit 3, nothing moved) when git
# tracks anything under the cache directory, when it is a link, or when git cannot say
# (its error is shown, never read as "not tracked": a job whose uid is not the cloner's
# gets "dubious ownership", and a branch's committed "cache" was then moved into
# ROTEIRO_HOME). `save` in those cases moves nothing back and removes the directory from
# the tree (a link itself, never what it leads to), so GitLab, which archives the cache
# paths after this step whatever it did, saves nothing the tree chose. What is left there is
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

# Each part moved: its place in the cache directory, and where the tool reads it.
parts=(
  "roteiro/store|$home/store"
  "roteiro/vm|$home/vm"
  "roteiro/cache/rootfs|$home/cache/rootfs"
  "roteiro/packages|$home/packages"
)

# The dependency caches are not moved but packed: each is a sparse 8 GiB file holding
# ~100 MB, and GitLab's cache archive (zip) writes holes out. `save` archives
# $home/cache/deps into $cache/$deps_packed/deps.tar keeping the holes, `restore` extracts
# it there and deletes the archive (ci/common.sh pack_deps, unpack_deps: GNU tar --sparse,
# bytes only, nothing parses the ext4 inside).
deps_packed="roteiro/deps-packed"

# planted: why the cache directory is the tree's, not one GitLab extracted ("" when it is
# not), or status 2 when git cannot say (its error on stderr, unhidden).
planted() {
  local listing
  if [ -L "$cache" ]; then
    printf 'a link'
    return 0
  fi
  listing="$(git --literal-pathspecs ls-files -- "$name")" || return 2
  if [ -n "$listing" ]; then
    printf 'tracked by git'
  fi
}

# check_planted: `why` set as planted says; status 3, after saying why, when git failed.
check_planted() {
  local status=0
  why="$(planted)" || status=$?
  if [ "$status" -ne 0 ]; then
    ci_error "git could not say whether the repository itself has $name/ (git said why above), so it is taken for the tree's: no cache is restored from it or saved into it; a job running as another user than the one that cloned gets \"dubious ownership\" (git config --global --add safe.directory \"\$CI_PROJECT_DIR\" in before_script trusts this checkout)"
    return 3
  fi
}

# keep_image_used: before the image cache is archived, every provisioned image and image
# build but the one the lint used (lint.sh's record) is removed (`cache remove-image
# --all-except`, which never removes one a running lint holds). The cache's key is
# roteiro.toml, and GitLab archives it after every job whatever was restored: without
# this, each new image (`PYLINT_SANDBOX_IMAGE: build` after the toolchain moved, or
# another pinned PYLINT_SANDBOX_IMAGE) was saved beside every earlier one, for ever.
# No record (the lint stopped before its image was provisioned): nothing is removed.
# after_script runs in a shell of its own, without the PATH before_script set.
keep_image_used() {
  local record="$home/$LINT_IMAGE_RECORD" image tool=pylint-sandbox
  if [ ! -f "$record" ] || [ -L "$record" ]; then
    return 0
  fi
  image="$(head -c 4096 -- "$record" | head -n 1)"
  rm -f -- "$record"
  if [ -n "${PYLINT_SANDBOX_DIR:-}" ] && [ -x "$PYLINT_SANDBOX_DIR/bin/pylint-sandbox" ]; then
    tool="$PYLINT_SANDBOX_DIR/bin/pylint-sandbox"
  fi
  ci_note "keeping only the image the lint used in the image cache: $image"
  if ! "$tool" cache remove-image --all-except "$image"; then
    ci_note "the image cache is saved as it is: the tool said above why it removed nothing"
  fi
}

case "${1:-}" in
  restore)
    check_planted || exit 3
    if [ -n "$why" ]; then
      ci_error "the repository itself has $name/ ($why): a cache the tree chose is never used; rename it or set PYLINT_SANDBOX_CACHE"
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
    if [ -d "$cache/$deps_packed" ] && [ ! -L "$cache/$deps_packed" ]; then
      unpack_deps "$cache/$deps_packed" "$home/cache/deps"
    else
      rm -rf -- "${cache:?}/$deps_packed"
    fi
    ;;
  save)
    if ! check_planted || [ -n "$why" ]; then
      ci_note "not saving the cache into $name/${why:+: the repository has it ($why)}; removing it from the tree so GitLab archives none of it"
      rm -rf -- "$cache"
      exit 0
    fi
    keep_image_used
    for part in "${parts[@]}"; do
      to="$cache/${part%%|*}" from="${part#*|}"
      if [ ! -d "$from" ] || [ -L "$from" ]; then continue; fi
      rm -rf -- "$to"
      mkdir -p -- "$(dirname -- "$to")"
      mv -- "$from" "$to"
    done
    pack_deps "$home/cache/deps" "$cache/$deps_packed"
    ;;
  *)
    ci_error "usage: cache.sh restore|save"
    exit 2
    ;;
esac
