#!/usr/bin/env bash
# The action's last step (action.yml): fail the job with the lint's exit status, after
# the SARIF upload and the cache saves have run (the lint step is continue-on-error so
# that they do). 0 passes; 1 is findings at or above fail-on; 2 usage or configuration,
# 3 refused, 4 internal error (README.md, "Exit codes").
#
# Inputs arrive as environment variables: EXIT_CODE (the lint step's output exit-code),
# LINT_OUTCOME (that step's outcome), FAIL_ON (the input fail-on).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=ci/common.sh
source "$here/../common.sh"
CI_KIND=github

code="${EXIT_CODE:-}"
if ! [[ "$code" =~ ^[0-9]+$ ]]; then
  ci_error "the lint step ended without an exit status (its outcome: ${LINT_OUTCOME:-unknown}); the log above says why"
  exit 1
fi
case "$code" in
  0) exit 0 ;;
  1) ci_error "clippy findings at or above fail-on (${FAIL_ON:-warning}) that the baseline and the diff do not excuse: exit 1" ;;
  2) ci_error "pylint-sandbox: usage or configuration error (exit 2); the log above names it" ;;
  3) ci_error "pylint-sandbox refused to lint (exit 3); the log above says why and what to do" ;;
  *) ci_error "pylint-sandbox failed (exit $code); the log above says where the details are" ;;
esac
exit "$code"
