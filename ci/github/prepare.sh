#!/usr/bin/env bash
# The action's prepare step (action.yml): provision the VM assets and the image (each a
# no-op when the restored caches hold them intact), gate on `doctor`, fill the package
# cache (ci/common.sh `prepare` says why in this order).
#
# Outputs (GITHUB_OUTPUT): image, the pinned reference `image: build` made (the later
# steps lint with it); vm-key, the sha256 of the VM assets' manifest, which names the
# kernel package and every file's digest: the VM assets cache is saved under it, so a new
# kernel is a new cache and an unchanged one is never saved twice.
#
# Inputs arrive as environment variables: INPUT_PATH, INPUT_IMAGE, INPUT_ACCEL.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=ci/common.sh
source "$here/../common.sh"
CI_KIND=github

: "${GITHUB_OUTPUT:?this script is the prepare step of action.yml}"
cd "${GITHUB_WORKSPACE:-$PWD}"
tool_env "${INPUT_IMAGE:-}" "${INPUT_ACCEL:-auto}"
path="$(as_path "${INPUT_PATH:-.}")"

if [ "${INPUT_IMAGE:-}" = build ]; then
  ROTEIRO_LINT_IMAGE="$(build_image "$path")"
  export ROTEIRO_LINT_IMAGE
  printf 'image=%s\n' "$ROTEIRO_LINT_IMAGE" >>"$GITHUB_OUTPUT"
fi
prepare "$path"

manifest="${ROTEIRO_HOME:-$HOME/.roteiro}/vm/manifest.json"
printf 'vm-key=%s\n' "$(sha256sum <"$manifest" | cut -c1-32)" >>"$GITHUB_OUTPUT"
