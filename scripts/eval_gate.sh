#!/usr/bin/env bash
# The pull-request gate of .github/workflows/eval-gate.yml, as one script (docs/gate.md, "In CI"):
# replay the base commit's config and the candidate's with this checkout's code, then gate the
# candidate with the BASE COMMIT's policy: a change never chooses the policy that judges it (a
# policy edited by the pull request is shown in the summary and takes effect once merged).
#
#   BASE=<commit> MODE=replay|readwrite bash scripts/eval_gate.sh
#
# Environment: BASE (the baseline commit), MODE (the LLM cache mode of both runs), CONFIG and
# POLICY (paths in the repository), HARNESS (the harness command), BASE_DIR (where the base commit
# is checked out), CAP (an optional --max-cost-usd), OPENAI_API_KEY, GITHUB_STEP_SUMMARY.
# Exit codes: those of `harness gate` (0 pass, 1 regression, 2 bad input, 3 infrastructure), those
# of `harness run` when a run could not finish (2, 3), and 4: NOT GATED, no OPENAI_API_KEY where
# the runs must call the model (a fork's pull request gets no secrets) -- neither a pass nor a verdict.
set -uo pipefail
: "${BASE:?set BASE to the baseline commit}"
MODE=${MODE:-replay}
CONFIG=${CONFIG:-configs/prompt-gate.yaml}
POLICY=${POLICY:-configs/prompt-gate-policy.yaml}
HARNESS=${HARNESS:-.venv/bin/harness}
BASE_DIR=${BASE_DIR:-/tmp/base}
SUMMARY=${GITHUB_STEP_SUMMARY:-/dev/null}
NOT_GATED=4

say() { echo "$*"; echo "$*" >> "$SUMMARY"; }

if [ "$MODE" = readwrite ] && [ -z "${OPENAI_API_KEY:-}" ]; then
  say "## Gate: not gated (no OPENAI_API_KEY)"
  say ""
  say "A prompt or model changed, so both runs must call the model, and this job has no key (a fork's"
  say "pull request gets no secrets). This is not a verdict on the change. A maintainer can run the"
  say "workflow by hand (Actions → eval-gate → Run workflow) or push the branch to this repository."
  echo "::warning::not gated: no OPENAI_API_KEY (exit $NOT_GATED)"
  exit $NOT_GATED
fi

git worktree remove --force "$BASE_DIR" >/dev/null 2>&1 || true
git worktree add --detach "$BASE_DIR" "$BASE" >/dev/null || exit 2
if [ ! -f "$BASE_DIR/$POLICY" ]; then
  say "## Gate: bad input: the base commit $BASE has no $POLICY; the gate reads the policy from the base commit"
  exit 2
fi
if [ "$(git rev-parse "$BASE")" = "$(git rev-parse HEAD)" ]; then
  say "Note: the baseline is this commit itself ($BASE); the gate compares it with itself."
fi
if ! git diff --quiet "$BASE" HEAD -- "$POLICY"; then
  say "Note: this change edits \`$POLICY\`; it is gated by the base commit's policy (the edit applies once merged):"
  say ""
  say '```diff'
  git diff "$BASE" HEAD -- "$POLICY" | tee -a "$SUMMARY"
  say '```'
fi

ERR=$(mktemp)
run() {  # CONFIG RUN_ID: 0 or 1 (failed turns past the run's max_error_rate) go on to the gate
  "$HARNESS" run "$1" --run-id "$2" --no-progress --llm-cache "$MODE" ${CAP:+--max-cost-usd "$CAP"} \
    2> >(tee -a "$ERR" >&2)
  local code=$?
  [ $code -le 1 ] && return 0
  if [ $code = 3 ] && grep -q "budget exceeded" "$ERR"; then
    echo "::error::budget exceeded: raise llm.max_cost_usd or refresh the cache by hand (Actions → eval-gate → Run workflow)"
  fi
  return $code
}
run "$BASE_DIR/$CONFIG" base || exit $?
run "$CONFIG" pr || exit $?
"$HARNESS" gate --baseline runs/base --candidate runs/pr --policy "$BASE_DIR/$POLICY" -o reports/gate
