#!/usr/bin/env bash
# The GitLab template's lint step (ci/gitlab/pylint-sandbox.gitlab-ci.yml, script):
# provision, gate on doctor, fill the package cache (ci/common.sh `prepare`), then one
# `lint clippy` run writing the human report on stdout (the job log), GitLab's Code
# Quality report (gl-code-quality-report.json, which the template declares as
# `artifacts: reports: codequality`) and the JSON report (clippy.json).
#
# - PYLINT_SANDBOX_DIFF "auto" in a merge request pipeline makes the merge request's
#   diff with git (ci/common.sh make_pr_diff) against its target branch and passes it as
#   --diff; "none": no diff; any other value is the path of a diff the job wrote.
# - It exits with the lint's own status, so the job fails per PYLINT_SANDBOX_FAIL_ON.
#   Reports left in the checkout before the run are removed first, so an artifact never
#   is a file the tree committed.
#
# Variables (each a value, never shell text): PYLINT_SANDBOX_PATH, PYLINT_SANDBOX_IMAGE,
# PYLINT_SANDBOX_FAIL_ON, PYLINT_SANDBOX_BASELINE, PYLINT_SANDBOX_DIFF,
# PYLINT_SANDBOX_ACCEL, PYLINT_SANDBOX_ARGS; GitLab's CI_PROJECT_DIR,
# CI_PIPELINE_SOURCE, CI_MERGE_REQUEST_TARGET_BRANCH_NAME.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=ci/common.sh
source "$here/../common.sh"
CI_KIND=gitlab

: "${CI_PROJECT_DIR:?a GitLab job sets CI_PROJECT_DIR}"
cd "$CI_PROJECT_DIR"
quality="$CI_PROJECT_DIR/gl-code-quality-report.json"
report="$CI_PROJECT_DIR/clippy.json"
rm -f -- "$quality" "$report"

# The image this lint uses, written once it is provisioned, for `cache.sh save` to keep
# only it in the image cache (an earlier job's record never stands for this one's).
used="${ROTEIRO_HOME:-$HOME/.roteiro}/$LINT_IMAGE_RECORD"
rm -f -- "$used"

tool_env "${PYLINT_SANDBOX_IMAGE:-}" "${PYLINT_SANDBOX_ACCEL:-auto}"
path="$(as_path "${PYLINT_SANDBOX_PATH:-.}")"
if [ "${PYLINT_SANDBOX_IMAGE:-}" = build ]; then
  ROTEIRO_LINT_IMAGE="$(build_image "$path")"
  export ROTEIRO_LINT_IMAGE
fi
prepare "$path"
pylint-sandbox config get lint.image --path="$path" >"$used" || rm -f -- "$used"

args=(lint clippy "$path" --format=human "--format=gitlab=$quality" "--format=json=$report"
      "--fail-on=${PYLINT_SANDBOX_FAIL_ON:-warning}")
if [ -n "${PYLINT_SANDBOX_BASELINE:-}" ]; then
  args+=("--baseline=$PYLINT_SANDBOX_BASELINE")
fi
case "${PYLINT_SANDBOX_DIFF:-auto}" in
  none) ;;
  auto)
    if [ "${CI_PIPELINE_SOURCE:-}" = merge_request_event ]; then
      base="${CI_MERGE_REQUEST_TARGET_BRANCH_NAME:-}"
      if [ -z "$base" ]; then
        ci_error "a merge request pipeline without CI_MERGE_REQUEST_TARGET_BRANCH_NAME: no base to diff against"
        exit 3
      fi
      diff_dir="$(mktemp -d "${TMPDIR:-/tmp}/pylint-sandbox-mr.XXXXXX")"
      diff="$diff_dir/$(diff_name "$base")"
      if ! make_pr_diff "$base" "$diff"; then
        ci_error "could not make the diff of this merge request against origin/$base (git said why above); PYLINT_SANDBOX_DIFF=none lints without it"
        exit 3
      fi
      if [ -s "$diff" ]; then
        ci_note "linting against the diff of this merge request with origin/$base"
      else
        ci_note "this merge request adds no lines to origin/$base (no net change): linting, and no finding is new"
      fi
      args+=("--diff=$diff")
    fi
    ;;
  *) args+=("--diff=$PYLINT_SANDBOX_DIFF") ;;
esac
split_args "${PYLINT_SANDBOX_ARGS:-}"

status=0
pylint-sandbox "${args[@]}" ${EXTRA_ARGS[@]+"${EXTRA_ARGS[@]}"} || status=$?
if [ "$status" -eq 1 ]; then
  ci_error "clippy findings at or above fail-on (${PYLINT_SANDBOX_FAIL_ON:-warning}) that the baseline and the diff do not excuse: exit 1"
fi
exit "$status"
