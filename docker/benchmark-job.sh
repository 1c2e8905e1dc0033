#!/bin/sh
# The one-shot benchmark job of docker-compose.yml: run the benchmark against the adapter,
# score the run (with the judge when STREAMEVAL_JUDGE_URL is set), write the scores to
# $RESULTS_DIR/RUN_ID.json, and exit with the run's status (that of `streameval run`):
#   0  every session finished
#   1  the run ran but some sessions failed (their reasons are in the log above)
#   2  the run could not start (bad benchmark, unreachable adapter, ...)
#   3  the run ran but every session failed (the run's status is `failed`)
# The scores are written whenever the run ran (0, 1 and 3).
set -eu

: "${ADAPTER_URL:?set ADAPTER_URL to the adapter endpoint, ws://HOST:PORT/ws}"
: "${BENCHMARK:?set BENCHMARK to synthetic or a benchmark path}"
results_dir=${RESULTS_DIR:-/results}
mkdir -p "$results_dir"

# RUN_ARGS is split into words on purpose: it holds extra `streameval run` options.
# `streameval run --json` prints its summary even when it exits 1 or 3.
status=0
# shellcheck disable=SC2086
summary=$(streameval run --json \
    --adapter-url "$ADAPTER_URL" \
    --benchmark "$BENCHMARK" \
    ${VIDEO_ROOT:+--video-root "$VIDEO_ROOT"} \
    --profile "${PROFILE:-trace}" \
    --pacing "${PACING:-logical}" \
    --concurrency "${CONCURRENCY:-4}" \
    ${RUN_ARGS:-}) || status=$?
if [ -z "$summary" ]; then
    # The run did not run (the error line above says why): nothing to score.
    if [ "$status" -eq 0 ]; then status=2; fi
    exit "$status"
fi
echo "$summary"

field() {
    printf '%s' "$summary" | python3 -c "import json, sys; print(json.load(sys.stdin)['$1'])"
}
run_id=$(field run_id)
failed=$(field failed_total)

streameval score "$run_id" --json --records > "$results_dir/$run_id.json"
streameval score "$run_id"
echo "scores: $results_dir/$run_id.json"

if [ "$status" -eq 3 ]; then
    echo "$failed sessions failed: every session of run $run_id failed" >&2
elif [ "$failed" -ne 0 ]; then
    echo "$failed sessions failed" >&2
fi
exit "$status"
