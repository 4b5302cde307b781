#!/usr/bin/env bash
# The action's step after the SARIF upload (action.yml), run only when that upload failed:
# the upload is continue-on-error, so the lint's own verdict decides the job, but a
# failed upload must not pass in silence. Code scanning takes no SARIF from a private
# repository without GitHub Advanced Security ("Advanced Security must be enabled for
# this repository to use code scanning"), nor from a token without `security-events:
# write` (a pull request from a fork gets a read-only one). The step's error is in the
# log above; this says what it means, as a warning in the log and a line in the summary.
#
# Nothing reaches this script from an input.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=ci/common.sh
source "$here/../common.sh"
CI_KIND=github

message="the SARIF upload to code scanning failed, so the findings are not in code scanning (the annotations, the job summary and clippy.json have them): code scanning needs GitHub Advanced Security on a private repository and a token with security-events: write (a pull request from a fork has none); sarif: false skips the upload"
printf '::warning title=pylint-sandbox::%s\n' "$message"
if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -f "$GITHUB_STEP_SUMMARY" ] && [ ! -L "$GITHUB_STEP_SUMMARY" ]; then
  printf '\n**SARIF upload skipped**: %s.\n' "$message" >>"$GITHUB_STEP_SUMMARY"
fi
