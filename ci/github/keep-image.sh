#!/usr/bin/env bash
# The action's step before "Save the image store and root filesystems" (action.yml), run
# when that save runs: keep in the store only the image this job linted with, and in
# cache/images only the layout that built it (`pylint-sandbox cache remove-image
# --all-except`), so the saved cache is what the lint used. Restored by prefix, the cache
# of the previous toolchain's image was saved again beside the new one after every move
# (~2.5 GB each: its blobs, root filesystem and build layout), until GitHub's 10 GB per
# repository evicted every cache. Nothing a running lint holds is removed.
#
# The image: prepare's `image` output for `image: build` (BUILT_IMAGE), else the pinned
# INPUT_IMAGE, else what the repository's configuration names, read by the tool as the
# lint read it (`config get lint.image`). Inputs arrive as environment variables:
# BUILT_IMAGE, INPUT_IMAGE, INPUT_PATH, each passed to the tool as one argument.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=ci/common.sh
source "$here/../common.sh"
CI_KIND=github

cd "${GITHUB_WORKSPACE:-$PWD}"
if [ "${INPUT_IMAGE:-}" = build ] && [ -z "${BUILT_IMAGE:-}" ]; then
  ci_error "image: build, and the prepare step gave no image: nothing removed from the image cache"
  exit 2
fi
tool_env "${BUILT_IMAGE:-${INPUT_IMAGE:-}}" auto
path="$(as_path "${INPUT_PATH:-.}")"
image="$(pylint-sandbox config get lint.image --path="$path")"
if [ -z "$image" ] || [ "$image" = "(unset)" ]; then
  ci_error "no image is configured for $path: nothing removed from the image cache"
  exit 2
fi
ci_note "keeping only the image the lint used in the image cache: $image"
pylint-sandbox cache remove-image --all-except "$image"
