#!/usr/bin/env bash
# The action's prepare step (action.yml): provision the VM assets and the image (each a
# no-op when the restored caches hold them intact), gate on `doctor`, fill the package
# cache (ci/common.sh `prepare` says why in this order).
#
# Outputs (GITHUB_OUTPUT): image, the pinned reference `image: build` made (the later
# steps lint with it); image-key, what the image and dependency caches are saved under:
# the install step's image-key (IMAGE_KEY), and for `image: build` that key, `-`, and the
# first 32 hex digits of the built image's digest, since what a build makes is known only
# now (a toolchain file naming `stable`, or none and the runner's stable rustup toolchain,
# builds a new image whenever that toolchain moves, under the same install key); vm-key,
# the sha256 of the VM assets' manifest, which names the kernel package and every file's
# digest: the VM assets cache is saved under it, so a new kernel is a new cache and an
# unchanged one is never saved twice.
#
# Inputs arrive as environment variables: INPUT_PATH, INPUT_IMAGE, INPUT_ACCEL; and
# IMAGE_KEY, the install step's image-key output (32 hex digits).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=ci/common.sh
source "$here/../common.sh"
CI_KIND=github

: "${GITHUB_OUTPUT:?this script is the prepare step of action.yml}"
if ! [[ "${IMAGE_KEY:-}" =~ ^[0-9a-f]{32}$ ]]; then
  ci_error "IMAGE_KEY is not the install step's image-key (32 hex digits): this script is the prepare step of action.yml"
  exit 2
fi
cd "${GITHUB_WORKSPACE:-$PWD}"
tool_env "${INPUT_IMAGE:-}" "${INPUT_ACCEL:-auto}"
path="$(as_path "${INPUT_PATH:-.}")"

if [ "${INPUT_IMAGE:-}" = build ]; then
  ROTEIRO_LINT_IMAGE="$(build_image "$path")"
  export ROTEIRO_LINT_IMAGE
  # The tool prints a pinned reference; anything else is refused here, never keyed.
  if ! [[ "$ROTEIRO_LINT_IMAGE" =~ @sha256:([0-9a-f]{64})$ ]]; then
    ci_error "pylint-sandbox image build printed no pinned reference (REF@sha256:<64 hex>)"
    exit 4
  fi
  {
    printf 'image=%s\n' "$ROTEIRO_LINT_IMAGE"
    printf 'image-key=%s\n' "$IMAGE_KEY-${BASH_REMATCH[1]:0:32}"
  } >>"$GITHUB_OUTPUT"
else
  printf 'image-key=%s\n' "$IMAGE_KEY" >>"$GITHUB_OUTPUT"
fi
prepare "$path"

manifest="${ROTEIRO_HOME:-$HOME/.roteiro}/vm/manifest.json"
# computed apart from the printf: a failure inside "$(...)" in an argument does not stop
# the script under set -e, and an empty vm-key would save the assets under the bare prefix
vm_key="$(sha256sum <"$manifest" | cut -c1-32)"
printf 'vm-key=%s\n' "$vm_key" >>"$GITHUB_OUTPUT"
