#!/usr/bin/env bash
# The action's install step (action.yml): the Debian packages the tool runs, the tool in
# a virtual environment of its own, access to /dev/kvm, and the cache keys the next
# steps restore by.
#
# Only the `pylint-sandbox` command is put on the job's PATH (a link in a directory of
# its own): the virtual environment's python and pip stay off it, so the job's later
# steps keep the python they had.
#
# Outputs (GITHUB_OUTPUT): roteiro-home (the directory the caches hold parts of), image-key (what the image and root-filesystem caches depend on: the image
# reference a lint of INPUT_PATH would use, and the tool's version, whose root filesystem
# layout may change), all from the tool itself, so they are the values the lint will use.
# For `image: build` it is the toolchain file's bytes instead of a reference: what they
# build can move (`stable`), so the caches are saved under it and the built image's
# digest, which only the prepare step knows (prepare.sh's image-key output).
#
# Python: the job's python3 (one an earlier actions/setup-python step put on PATH, or the
# runner's), 3.11 or later; python3-venv and git come from apt when dpkg lacks them.
#
# Inputs arrive as environment variables (action.yml's `env:`), never as shell text:
# INPUT_VERSION, INPUT_PATH, INPUT_IMAGE, INPUT_ACCEL.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=ci/common.sh
source "$here/../common.sh"
CI_KIND=github

: "${GITHUB_OUTPUT:?this script is the install step of action.yml}"
workspace="${GITHUB_WORKSPACE:-$PWD}"
action="${GITHUB_ACTION_PATH:-$(cd "$here/../.." && pwd)}"

# python3-venv: the tool's own environment (Debian's and Ubuntu's python3 make none
# without it); git: the pull request's diff.
install_packages python3 python3-venv git
python="$(command -v python3)"
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  ci_error "pylint-sandbox needs Python 3.11 or later; $python is $("$python" -V 2>&1) (put a newer one on PATH first, e.g. with actions/setup-python)"
  exit 2
fi

dir="${RUNNER_TEMP:-${TMPDIR:-/tmp}}/pylint-sandbox"
spec="${INPUT_VERSION:-}"
[ -n "$spec" ] || spec="$action"
ci_note "installing pylint-sandbox from ${spec@Q}"
"$python" -m venv "$dir/venv"
"$dir/venv/bin/python" -m pip install --quiet --disable-pip-version-check -- "$spec"
mkdir -p "$dir/bin"
ln -sfn "$dir/venv/bin/pylint-sandbox" "$dir/bin/pylint-sandbox"
printf '%s\n' "$dir/bin" >>"${GITHUB_PATH:-/dev/null}"
export PATH="$dir/bin:$PATH"
pylint-sandbox --version

# GitHub's Linux runners have /dev/kvm, readable only by the kvm group; GitHub's own
# advice is this udev rule. Nothing is changed when the device is already usable or absent.
if [ "${INPUT_ACCEL:-auto}" != tcg ] && [ -e /dev/kvm ] && ! { [ -r /dev/kvm ] && [ -w /dev/kvm ]; }; then
  ci_note "giving this job access to /dev/kvm (a udev rule)"
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  printf '%s\n' 'KERNEL=="kvm", GROUP="kvm", MODE="0666", OPTIONS+="static_node=kvm"' \
    | "${sudo[@]}" tee /etc/udev/rules.d/99-pylint-sandbox-kvm.rules >/dev/null
  "${sudo[@]}" udevadm control --reload-rules || true
  "${sudo[@]}" udevadm trigger --name-match=kvm || true
fi

cd "$workspace"
tool_env "${INPUT_IMAGE:-}" "${INPUT_ACCEL:-auto}"
path="$(as_path "${INPUT_PATH:-.}")"
# An unreadable configuration is reported by the prepare step, with the tool's words.
if [ "${INPUT_IMAGE:-}" = build ]; then
  image=build
else
  image="$(pylint-sandbox config get lint.image --path="$path" 2>/dev/null || echo '(unreadable)')"
fi
version="$(pylint-sandbox --version)"
image_key="$(image_key "$image" "$path" "$version")"
{
  printf 'roteiro-home=%s\n' "${ROTEIRO_HOME:-$HOME/.roteiro}"
  printf 'image-key=%s\n' "$image_key"
} >>"$GITHUB_OUTPUT"
