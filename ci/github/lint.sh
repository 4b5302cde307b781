#!/usr/bin/env bash
# The action's lint step (action.yml): one `lint clippy` run, in one VM, writing every
# output the job uses: GitHub annotations on stdout (the log), the JSON report
# (clippy.json), SARIF for code scanning (clippy.sarif, with --category) and, written by
# the tool itself, the Markdown summary on the job's page ($GITHUB_STEP_SUMMARY).
#
# - diff "auto" on a pull_request(_target) event makes the pull request's diff with git
#   (ci/common.sh make_pr_diff, docs/ADOPTING.md's options) and passes it as --diff:
#   only findings on lines the pull request adds fail the job. The file is named for what
#   it is (`origin_BASE...HEAD.diff`, ci/common.sh diff_name), since the report and the
#   summary name it. A pull request with no net change has an empty diff: it is linted,
#   no finding is new, and the summary says the change adds no lines. "none": no diff;
#   any other value is the path of a diff the workflow wrote.
# - It exits with the lint's own status (0 clean at fail-on, 1 findings, 2 usage, 3
#   refused, 4 internal): the step is continue-on-error, so the SARIF upload still runs,
#   and the action's last step (finish.sh) fails the job with that status.
# - attest "true" adds `--attest` (docs/ATTESTATION.md): the statement is written to a
#   private directory under RUNNER_TEMP, never into the checkout, and its predicate is
#   taken out of it beside it (actions/attest takes a predicate and the subjects' files,
#   and signs a statement of its own around them). "false": none.
# - Outputs (GITHUB_OUTPUT), written whatever happened: exit-code; findings (the report's
#   count of findings, empty when no report was written), split into new-findings (those
#   that can fail the job: not in the baseline and not outside the diff; every finding
#   when neither was given) and known-findings (the rest); sarif and report (the files'
#   paths, empty when not written: a refused lint writes none, and nothing is uploaded);
#   attestation, predicate and attest-subjects (the statement, its predicate, and the
#   report files it names, one a line; empty when no statement was written).
#   Reports left in the checkout before the run are removed first, so an output never
#   describes a file the tree committed.
#
# Inputs arrive as environment variables (action.yml's `env:`), never as shell text:
# INPUT_PATH, INPUT_IMAGE, INPUT_FAIL_ON, INPUT_CATEGORY, INPUT_SARIF, INPUT_BASELINE,
# INPUT_DIFF, INPUT_ACCEL, INPUT_ARGS, INPUT_ATTEST.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=ci/common.sh
source "$here/../common.sh"
CI_KIND=github

: "${GITHUB_OUTPUT:?this script is the lint step of action.yml}"
workspace="${GITHUB_WORKSPACE:-$PWD}"
cd "$workspace"
report="$workspace/clippy.json"
sarif="$workspace/clippy.sarif"
statement="" predicate=""

# shellcheck disable=SC2317  # run by the EXIT trap
finish() {
  local status=$? findings="" new="" known="" counts="" written_sarif="" written_report=""
  if [ -f "$report" ] && [ ! -L "$report" ]; then
    written_report="$report"
    # new: as the report model's Finding.gating decides (report/model.py)
    counts="$(python3 -c 'import json, sys
report = json.load(open(sys.argv[1]))
new = sum(f.get("baseline") != "known" and f.get("in_diff") is not False for f in report["findings"])
total = int(report["summary"]["total"])
print(total, new, total - new)' "$report" 2>/dev/null || true)"
    if [[ "$counts" =~ ^([0-9]+)\ ([0-9]+)\ ([0-9]+)$ ]]; then
      findings="${BASH_REMATCH[1]}" new="${BASH_REMATCH[2]}" known="${BASH_REMATCH[3]}"
    fi
  fi
  if [ -f "$sarif" ] && [ ! -L "$sarif" ]; then
    written_sarif="$sarif"
  fi
  local written_statement="" written_predicate="" subjects=""
  if [ -n "$statement" ] && [ -f "$statement" ] && [ -n "$written_report$written_sarif" ]; then
    # the predicate actions/attest signs; the statement is the tool's own (no --attest-key here)
    if python3 -c 'import json, sys
statement = json.load(open(sys.argv[1]))
json.dump(statement["predicate"], open(sys.argv[2], "x"), indent=2, sort_keys=True)' \
      "$statement" "$predicate" 2>/dev/null; then
      written_statement="$statement" written_predicate="$predicate"
      subjects="$written_report"
      if [ -n "$written_sarif" ]; then
        subjects="${subjects:+$subjects$'\n'}$written_sarif"
      fi
    fi
  fi
  {
    printf 'exit-code=%s\n' "$status"
    printf 'findings=%s\n' "$findings"
    printf 'new-findings=%s\n' "$new"
    printf 'known-findings=%s\n' "$known"
    printf 'sarif=%s\n' "$written_sarif"
    printf 'report=%s\n' "$written_report"
    if [ -n "$statement" ]; then  # attest: true (unset outputs read as empty)
      printf 'attestation=%s\n' "$written_statement"
      printf 'predicate=%s\n' "$written_predicate"
      # a list, one path a line: GitHub's multiline form, with a delimiter no path here holds
      printf 'attest-subjects<<PYLINT_SANDBOX_EOF\n%s\nPYLINT_SANDBOX_EOF\n' "$subjects"
    fi
  } >>"$GITHUB_OUTPUT"
  # The tool writes the summary when it has a report; without one, the page says so.
  if [ -z "$written_report" ] && [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -f "$GITHUB_STEP_SUMMARY" ]; then
    printf '### clippy: no report (pylint-sandbox exited %s)\n\nThe job log says why.\n' "$status" \
      >>"$GITHUB_STEP_SUMMARY"
  fi
  exit "$status"
}
trap finish EXIT

rm -f -- "$report" "$sarif"
# BUILT_IMAGE: the reference the prepare step made for `image: build`.
tool_env "${BUILT_IMAGE:-${INPUT_IMAGE:-}}" "${INPUT_ACCEL:-auto}"
path="$(as_path "${INPUT_PATH:-.}")"

args=(lint clippy "$path" --format=github "--format=json=$report" "--fail-on=${INPUT_FAIL_ON:-warning}")
case "${INPUT_SARIF:-true}" in
  true) args+=("--format=sarif=$sarif" "--category=${INPUT_CATEGORY:-clippy}") ;;
  false) ;;
  *)
    ci_error "the input sarif is ${INPUT_SARIF@Q}: true or false"
    exit 2
    ;;
esac
case "${INPUT_ATTEST:-false}" in
  true)
    attest_dir="$(mktemp -d "${RUNNER_TEMP:-${TMPDIR:-/tmp}}/pylint-sandbox-attest.XXXXXX")"
    statement="$attest_dir/clippy.intoto.json" predicate="$attest_dir/clippy.provenance.json"
    args+=("--attest=$statement")
    ;;
  false) ;;
  *)
    ci_error "the input attest is ${INPUT_ATTEST@Q}: true or false"
    exit 2
    ;;
esac
if [ -n "${INPUT_BASELINE:-}" ]; then
  args+=("--baseline=$INPUT_BASELINE")
fi
case "${INPUT_DIFF:-auto}" in
  none) ;;
  auto)
    case "${GITHUB_EVENT_NAME:-}" in
      pull_request | pull_request_target)
        if [ -z "${GITHUB_BASE_REF:-}" ]; then
          ci_error "a ${GITHUB_EVENT_NAME} event without GITHUB_BASE_REF: no base to diff against"
          exit 3
        fi
        diff_dir="$(mktemp -d "${RUNNER_TEMP:-${TMPDIR:-/tmp}}/pylint-sandbox-pr.XXXXXX")"
        diff="$diff_dir/$(diff_name "$GITHUB_BASE_REF")"
        if ! make_pr_diff "$GITHUB_BASE_REF" "$diff"; then
          ci_error "could not make the diff of this pull request against origin/$GITHUB_BASE_REF (git said why above); diff: none lints without it"
          exit 3
        fi
        if [ -s "$diff" ]; then
          ci_note "linting against the diff of this pull request with origin/$GITHUB_BASE_REF"
        else
          ci_note "this pull request adds no lines to origin/$GITHUB_BASE_REF (no net change): linting, and no finding is new"
        fi
        args+=("--diff=$diff")
        ;;
    esac
    ;;
  *) args+=("--diff=$INPUT_DIFF") ;;
esac
split_args "${INPUT_ARGS:-}"

status=0
pylint-sandbox "${args[@]}" ${EXTRA_ARGS[@]+"${EXTRA_ARGS[@]}"} || status=$?
exit "$status"
