#!/usr/bin/env bash
# The GitLab template's install step (ci/gitlab/pylint-sandbox.gitlab-ci.yml,
# before_script): the Debian packages the tool runs, python's venv, and the tool in a
# virtual environment under PYLINT_SANDBOX_DIR, with only its command linked into
# PYLINT_SANDBOX_DIR/bin (which the template puts on PATH).
#
# Variables: PYLINT_SANDBOX_DIR (where the tool is installed; outside the project
# directory, so the copy of the tree a lint makes never holds it), PYLINT_SANDBOX_VERSION
# (the pip requirement to install; empty: the checkout this script is in).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=ci/common.sh
source "$here/../common.sh"
CI_KIND=gitlab

: "${PYLINT_SANDBOX_DIR:?the template sets PYLINT_SANDBOX_DIR}"
# python3-venv: the tool's own environment (Debian's python3 has no venv without it);
# git: the merge request's diff.
install_packages python3 python3-venv git

spec="${PYLINT_SANDBOX_VERSION:-}"
[ -n "$spec" ] || spec="$(cd "$here/../.." && pwd)"
ci_note "installing pylint-sandbox from ${spec@Q}"
python3 -m venv "$PYLINT_SANDBOX_DIR/venv"
"$PYLINT_SANDBOX_DIR/venv/bin/python" -m pip install --quiet --disable-pip-version-check -- "$spec"
mkdir -p "$PYLINT_SANDBOX_DIR/bin"
ln -sfn "$PYLINT_SANDBOX_DIR/venv/bin/pylint-sandbox" "$PYLINT_SANDBOX_DIR/bin/pylint-sandbox"
"$PYLINT_SANDBOX_DIR/bin/pylint-sandbox" --version
