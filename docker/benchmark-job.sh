#!/bin/sh
# The one-shot benchmark job of docker-compose.yml: run the benchmark against the adapter,
# score the run (with the judge when STREAMEVAL_JUDGE_URL is set), write the scores to
# $RESULTS_DIR/RUN_ID.json, and exit with the run's status (that of `streameval run`):
#   0  every session finished
#   1  the run ran but some sessions failed (their reasons are in the log above)
#   2  the run could not start (bad benchmark, unreachable adapter, ...), or the adapter or
#      the judge was not ready within READY_TIMEOUT seconds (one line says which)
#   3  the run ran but every session failed (the run's status is `failed`)
#   130, 143  SIGINT, SIGTERM (`docker stop`): passed on to `streameval run`, whose run is
#      then `interrupted` and resumable (`streameval run --resume RUN_ID`)
# The scores are written whenever the run ran (0, 1 and 3).
set -eu

: "${ADAPTER_URL:?set ADAPTER_URL to the adapter endpoint, ws://HOST:PORT/ws}"
: "${BENCHMARK:?set BENCHMARK to synthetic or a benchmark path}"
results_dir=${RESULTS_DIR:-/results}
mkdir -p "$results_dir"

# As PID 1 a shell ignores the signals it has no trap for (`docker stop` would kill it 10 s
# later), and it acts on a trapped one only once its foreground command has ended: every
# long step runs as a child, waited for, that gets the signal passed on.
trap 'exit 143' TERM
trap 'exit 130' INT
forwarding() {  # COMMAND...: run it, passing SIGTERM and SIGINT on; its status in $child_status
    "$@" &
    child=$!
    trap 'kill -TERM "$child" 2>/dev/null || true' TERM
    trap 'kill -INT "$child" 2>/dev/null || true' INT
    child_status=0
    wait "$child" || child_status=$?
    # A trapped signal ends `wait` early (status > 128) while the child winds down: wait on.
    while kill -0 "$child" 2>/dev/null; do
        child_status=0
        wait "$child" || child_status=$?
    done
    trap 'exit 143' TERM
    trap 'exit 130' INT
}

# Compose starts this job even when an optional dependency is unhealthy (`required: false`):
# GET a readiness URL until it answers 200, for READY_TIMEOUT seconds (an adapter whose
# /healthz says `failed: ...` is not waited for); otherwise one line, and the job exits 2.
READY_PROBE='
import sys, time, urllib.error, urllib.request
what, url, token, limit = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
deadline = time.monotonic() + limit
while True:
    try:
        with urllib.request.urlopen(request, timeout=5):
            sys.exit(0)
    except urllib.error.HTTPError as exc:
        body = exc.read(200).decode(errors="replace").strip()
        last = f"HTTP {exc.code} {body}".strip()
        if body.startswith("failed"):
            break
    except (OSError, ValueError) as exc:
        last = str(getattr(exc, "reason", exc))
    if time.monotonic() >= deadline:
        break
    time.sleep(1)
print(f"benchmark job: the {what} at {url} is not ready after {limit:g} s (READY_TIMEOUT): "
      f"{last}", file=sys.stderr)
sys.exit(2)
'
wait_ready() {  # WHAT URL [BEARER_TOKEN]
    forwarding python3 -c "$READY_PROBE" "$1" "$2" "${3:-}" "${READY_TIMEOUT:-60}"
    if [ "$child_status" -ne 0 ]; then exit "$child_status"; fi
}
# ws://HOST:PORT/ws -> http://HOST:PORT/healthz (wss -> https)
adapter_health=$(printf '%s' "$ADAPTER_URL" | sed -e 's#^ws#http#' -e 's#^\(https*://[^/]*\).*#\1/healthz#')
wait_ready adapter "$adapter_health"
if [ -n "${STREAMEVAL_JUDGE_URL:-}" ]; then
    # The judge's OpenAI API (base URL .../v1): its model list answers once the model is loaded.
    wait_ready judge "${STREAMEVAL_JUDGE_URL%/}/models" "${STREAMEVAL_JUDGE_API_KEY:-}"
fi

# RUN_ARGS is split into words on purpose: it holds extra `streameval run` options.
# `streameval run --json` prints its summary even when it exits 1 or 3.
summary_file=$(mktemp)
# shellcheck disable=SC2086
forwarding streameval run --json \
    --adapter-url "$ADAPTER_URL" \
    --benchmark "$BENCHMARK" \
    ${VIDEO_ROOT:+--video-root "$VIDEO_ROOT"} \
    --profile "${PROFILE:-trace}" \
    --pacing "${PACING:-logical}" \
    --concurrency "${CONCURRENCY:-4}" \
    ${RUN_ARGS:-} > "$summary_file"
status=$child_status
summary=$(cat "$summary_file")
rm -f "$summary_file"
if [ "$status" -eq 130 ] || [ "$status" -eq 143 ]; then
    # Interrupted: the run says how to resume it; nothing to score yet.
    exit "$status"
fi
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
