#!/usr/bin/env bash
# The action's review step (action.yml), after the lint and the SARIF upload: with the
# input review true, on a pull_request(_target) event, `pylint-sandbox review` posts the
# lint's findings as one pull-request review (commands/review.py): comments on the lines
# the pull request adds, machine-applicable fixes as suggested changes, nothing an earlier
# run of the bot already posted. The job needs `permissions: pull-requests: write`.
#
# It never fails the job: the step is continue-on-error, and the tool itself exits 0
# whatever GitHub answers (a fork's read-only token: a line saying why, and the lint
# step's annotations stand). The lint's exit status is still what finish.sh fails the job with.
#
# The diff: the input diff's file when it names one; with auto, the pull request's diff
# made again here as lint.sh makes it (ci/common.sh make_pr_diff); with none, no diff, and
# then every finding is listed in the review's body, none commented on a line.
#
# Inputs arrive as environment variables (action.yml's `env:`), never as shell text:
# INPUT_REVIEW, INPUT_DIFF; REPORT (the lint step's output report), GITHUB_TOKEN (the
# job's token, read by the tool from its environment and never put on a command line).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=ci/common.sh
source "$here/../common.sh"
CI_KIND=github

workspace="${GITHUB_WORKSPACE:-$PWD}"
cd "$workspace"
case "${INPUT_REVIEW:-false}" in
  true) ;;
  false) exit 0 ;;
  *)
    ci_error "the input review is ${INPUT_REVIEW@Q}: true or false"
    exit 2
    ;;
esac
case "${GITHUB_EVENT_NAME:-}" in
  pull_request | pull_request_target) ;;
  *)
    ci_note "review: only a pull request's job posts a review (this is a ${GITHUB_EVENT_NAME:-unknown} event)"
    exit 0
    ;;
esac
if [ -z "${REPORT:-}" ]; then
  ci_note "review: the lint wrote no report, so there is nothing to review"
  exit 0
fi

# --no-annotate: the lint step printed the annotations already (lint.sh --format=github);
# a review that cannot be posted only says why, and they are not shown twice.
args=(review "$REPORT" "--tree=$workspace" --no-annotate)
case "${INPUT_DIFF:-auto}" in
  none) ;;
  auto)
    diff="$(mktemp "${RUNNER_TEMP:-${TMPDIR:-/tmp}}/pylint-sandbox-review.XXXXXX.diff")"
    if [ -n "${GITHUB_BASE_REF:-}" ] && make_pr_diff "$GITHUB_BASE_REF" "$diff"; then
      args+=("--diff=$diff")
    else
      ci_note "review: no diff of this pull request (git said why above): every finding goes in the review's body"
    fi
    ;;
  *) args+=("--diff=$INPUT_DIFF") ;;
esac
pylint-sandbox "${args[@]}"
