# Shared by scripts/test and scripts/demo: install what the project needs, idempotently.
# Sourced, not run. Debian packages first (only the missing ones), then the .venv.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="$ROOT/.venv"

# qemu-system-x86: the microVM; busybox-static, cpio: the tests' own guests and images
# (the VM assets are provisioned without them: vm/assets/debian_archive.py); kmod: depmod,
# which a test cross-checks the module order against;
# e2fsprogs: ext4 root filesystem and scratch images without root or loop devices;
# docker-registry: the loopback OCI registry the store's tests pull from; zstd:
# zstd-compressed image layers; strace: what fetch-deps executes, observed
# (tests/integration/lint/test_fetch_deps.py). The linter image needs no host tool:
# `pylint-sandbox image build` reads Debian's archive itself.
APT_PACKAGES=(qemu-system-x86 busybox-static cpio kmod e2fsprogs docker-registry zstd strace)

need_apt=()
for package in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
    || need_apt+=("$package")
done
if [ "${#need_apt[@]}" -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing Debian packages: ${need_apt[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV" >&2
  "$PYTHON" -m venv "$VENV"
fi
stamp="$VENV/.installed-$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "setup: installing pylint-sandbox and its test dependencies into $VENV" >&2
  "$VENV/bin/pip" install -q --upgrade pip >/dev/null
  "$VENV/bin/pip" install -q -e "$ROOT[test]"
  rm -f "$VENV"/.installed-*
  touch "$stamp"
fi
