#!/usr/bin/env bash
# The pull-request gate of .github/workflows/eval-gate.yml, as one script (docs/gate.md, "In CI"):
# replay the base commit's config and the candidate's with this checkout's code, both on the BASE
# COMMIT's eval set (the folder the base config's eval_set names: corpus, sessions, labels), then
# gate the candidate with the BASE COMMIT's policy: a change never chooses the labels or the policy
# that judge it (an edit of either is shown in the summary and takes effect once merged).
#
#   BASE=<commit> MODE=replay|readwrite bash scripts/eval_gate.sh
#
# Environment: BASE (the baseline commit), MODE (the LLM cache mode of both runs), CONFIG and
# POLICY (paths in the repository), HARNESS (the harness command), PYTHON (the Python of the harness, to
# read the configs' eval_set; default: the one beside HARNESS), BASE_DIR (where the base commit is
# checked out, a worktree of its own), CAP (an optional --max-cost-usd), OPENAI_API_KEY,
# GITHUB_STEP_SUMMARY.
# Exit codes: those of `harness gate` (0 pass, 1 regression, 2 bad input, 3 infrastructure), those
# of `harness run` when a run could not finish (2, 3), and 4: NOT GATED, no OPENAI_API_KEY where
# the runs must call the model (a fork's pull request gets no secrets) -- neither a pass nor a verdict.
set -uo pipefail
: "${BASE:?set BASE to the baseline commit}"
MODE=${MODE:-replay}
CONFIG=${CONFIG:-configs/prompt-gate.yaml}
POLICY=${POLICY:-configs/prompt-gate-policy.yaml}
HARNESS=${HARNESS:-.venv/bin/harness}
PYTHON=${PYTHON:-$(dirname "$HARNESS")/python}
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

# The eval set: the folder the base commit's config names (read as the harness reads a config's
# eval_set: from the config's folder, else the repository's), as the base commit has it.
evalset() { "$PYTHON" -m harness.analysis.base_evalset "$@"; }
YAML_ERR=$(mktemp)
if ! EVAL_SET=$(evalset folder "$BASE_DIR/$CONFIG" "$BASE_DIR" 2>"$YAML_ERR"); then
  say "## Gate: bad input: $(cat "$YAML_ERR")"
  exit 2
fi
if [ -z "$EVAL_SET" ]; then
  say "## Gate: bad input: the base commit's $CONFIG names no eval_set"
  exit 2
fi
SET=()  # the --eval-set of both runs: the base commit's folder, when the repository holds it
if git cat-file -e "$BASE:$EVAL_SET" 2>/dev/null; then
  SET=(--eval-set "$BASE_DIR/$EVAL_SET")
  if ! PR_SET=$(evalset folder "$CONFIG" . 2>"$YAML_ERR"); then
    say "## Gate: bad input: $(cat "$YAML_ERR")"
    exit 2
  fi
  if [ "$PR_SET" != "$EVAL_SET" ]; then
    say "Note: this change's \`$CONFIG\` names the eval set \`$PR_SET\`; both runs replay the base commit's \`$EVAL_SET\` (the change applies once merged)."
  fi
  if ! git diff --quiet "$BASE" HEAD -- "$EVAL_SET"; then  # the files and labels it changes
    evalset change "$BASE_DIR/$EVAL_SET" "$EVAL_SET" "$EVAL_SET" | tee -a "$SUMMARY"
  fi
else
  say "Note: the eval set \`$EVAL_SET\` is not part of the base commit; both runs read it as it is on disk here."
fi

ERR=$(mktemp)
run() {  # CONFIG RUN_ID: 0 or 1 (failed turns past the run's max_error_rate) go on to the gate
  "$HARNESS" run "$1" --run-id "$2" ${SET[@]+"${SET[@]}"} --no-progress --llm-cache "$MODE" ${CAP:+--max-cost-usd "$CAP"} \
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
