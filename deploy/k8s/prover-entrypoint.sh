#!/bin/sh
# prover-entrypoint.sh PROVER [ARGS...]: start the prover with the memory budget headroom gives it.
#
# Asks the headroom agent (GET $HEADROOM_AGENT/v1/budget, docs/api.md) until it answers with a
# valid budget, then execs PROVER with, in its environment,
#   HEADROOM_BUDGET_BYTES  everything the prover may use in all (docs/prover-contract.md)
#   HEADROOM_MARGIN_BYTES  what the agent kept back for what the prover cannot see
#   HEADROOM_BUDGET_GENERATION
# and, when HEADROOM_BUDGET_ARG is set, one more argument made from it: {bytes}, {mib} and
# {gib} replaced by the budget (whole units, rounded down), e.g. "--memory-budget={gib}GiB".
# It never starts the prover on a guessed budget: with none after HEADROOM_BUDGET_TIMEOUT
# seconds it exits 75 with the agent's last word, and the pod's restart policy tries again.
#
# While it waits, its own command line names this script: a role rule
# "prover=cmdline:prover-entrypoint\.sh" makes the agent take this container's cgroup as the
# prover's before the prover has ever run (docs/agent.md, "The prover's budget").
#
# Environment:
#   HEADROOM_AGENT           the agent (default http://127.0.0.1:9464: a sidecar in this pod)
#   HEADROOM_BUDGET_TIMEOUT  seconds to wait for a budget (default 300; 0 waits forever)
#   HEADROOM_BUDGET_RETRY    seconds between two attempts (default 2)
#   HEADROOM_BUDGET_MIN      bytes: a smaller budget is not taken, waiting goes on (default 1)
#   HEADROOM_BUDGET_ARG      template of an argument appended to the prover's (default none)
#   HEADROOM_BUDGET_CLIENT   auto (default: headroom if on PATH, else curl, else wget),
#                            headroom (`headroom budget --format env`), curl or wget
# POSIX sh: dash, bash or busybox; the image needs curl, wget or the headroom binary.

me=prover-entrypoint
agent=${HEADROOM_AGENT:-http://127.0.0.1:9464}
agent=${agent%/}
timeout=${HEADROOM_BUDGET_TIMEOUT:-300}
retry=${HEADROOM_BUDGET_RETRY:-2}
min=${HEADROOM_BUDGET_MIN:-1}
template=${HEADROOM_BUDGET_ARG:-}
client=${HEADROOM_BUDGET_CLIENT:-auto}

say() { printf '%s: %s\n' "$me" "$*" >&2; }
is_count() { case $1 in '' | *[!0-9]*) return 1 ;; *) return 0 ;; esac; }

if [ $# -eq 0 ]; then
  say "usage: $0 PROVER [ARGS...] (the prover to start with its budget)"
  exit 64
fi
if ! is_count "$timeout"; then
  say "HEADROOM_BUDGET_TIMEOUT=$timeout: not a whole number of seconds"
  exit 64
fi
if ! is_count "$min"; then
  say "HEADROOM_BUDGET_MIN=$min: not a whole number of bytes"
  exit 64
fi
case $client in
  auto)
    if command -v headroom >/dev/null 2>&1; then client=headroom
    elif command -v curl >/dev/null 2>&1; then client=curl
    elif command -v wget >/dev/null 2>&1; then client=wget
    else
      say "no HTTP client: this image has neither headroom, curl nor wget (set HEADROOM_BUDGET_CLIENT or add one)"
      exit 69
    fi ;;
  headroom | curl | wget)
    if ! command -v "$client" >/dev/null 2>&1; then
      say "HEADROOM_BUDGET_CLIENT=$client: $client is not on PATH"
      exit 69
    fi ;;
  *)
    say "HEADROOM_BUDGET_CLIENT=$client: must be auto, headroom, curl or wget"
    exit 64 ;;
esac

# The first occurrence of a numeric field. In the agent's answer the top-level budget_bytes,
# margin_bytes and generation come before `learned` (whose last_kill has a budget_bytes of
# its own); the test in tests/kit/manifests_test.py checks this against a real agent.
field() { printf '%s\n' "$2" | grep -o "\"$1\": *[0-9][0-9]*" | head -n 1 | sed 's/.*: *//'; }
# The agent's "error" (a JSON string; escaped quotes kept as they are).
json_error() { printf '%s\n' "$1" | sed -n -E 's/.*"error": *"(([^"\\]|\\.)*)".*/\1/p' | head -n 1; }

bytes="" margin="" generation="" why=""

# One attempt: sets bytes, margin, generation and returns 0, or sets why and returns 1.
ask() {
  bytes="" margin="" generation=""
  url="$agent/v1/budget"
  case $client in
    headroom)
      # `headroom budget` computes a budget itself when the agent does not answer; only the
      # agent's is taken (it holds the learned margin and sees the whole node).
      out=$(headroom --log-level info budget --format env --agent "$agent" 2>&1)
      rc=$?
      line=$(printf '%s\n' "$out" | grep '^HEADROOM_BUDGET_BYTES=' | head -n 1)
      if [ $rc -ne 0 ] || [ -z "$line" ]; then
        why="headroom budget: $(printf '%s\n' "$out" | tail -n 1)"
        return 1
      fi
      case $line in
        *HEADROOM_BUDGET_SOURCE=agent*) ;;
        *)
          agent_said=$(printf '%s\n' "$out" | sed -n 's/.*no budget from the agent (\(.*\)): computing it here.*/\1/p' | head -n 1)
          why="no budget from the agent at $agent: ${agent_said:-it did not answer}"
          return 1 ;;
      esac
      bytes=$(printf '%s\n' "$line" | sed -n 's/.*HEADROOM_BUDGET_BYTES=\([0-9]*\).*/\1/p')
      margin=$(printf '%s\n' "$line" | sed -n 's/.*HEADROOM_MARGIN_BYTES=\([0-9]*\).*/\1/p')
      generation=$(printf '%s\n' "$line" | sed -n 's/.*HEADROOM_BUDGET_GENERATION=\([0-9]*\).*/\1/p')
      ;;
    curl | wget)
      if [ "$client" = curl ]; then
        resp=$(curl -sS -m 10 -w '\n%{http_code}' "$url" 2>&1)
        rc=$?
        if [ $rc -ne 0 ]; then
          why="no answer from $url: $(printf '%s\n' "$resp" | tail -n 1)"
          return 1
        fi
        code=$(printf '%s\n' "$resp" | tail -n 1)
        body=$(printf '%s\n' "$resp" | sed '$d')
      else
        # wget prints no body on an error status (busybox has no --content-on-error).
        body=$(wget -q -T 10 -O - "$url" 2>&1)
        rc=$?
        if [ $rc -ne 0 ]; then
          why="no budget from $url (wget exit $rc: no answer, or an error status such as 503)"
          return 1
        fi
        code=200
      fi
      if [ "$code" != 200 ]; then
        err=$(json_error "$body")
        why="$url answered HTTP $code: ${err:-$(printf '%s' "$body" | head -c 300)}"
        return 1
      fi
      if ! printf '%s\n' "$body" | grep -q '"valid": *true'; then
        why="$url answered without \"valid\": true: $(printf '%s' "$body" | head -c 300)"
        return 1
      fi
      bytes=$(field budget_bytes "$body")
      margin=$(field margin_bytes "$body")
      generation=$(field generation "$body")
      ;;
  esac
  if ! is_count "$bytes" || ! is_count "$margin" || ! is_count "$generation"; then
    why="the answer has no budget_bytes, margin_bytes and generation as numbers"
    return 1
  fi
  if [ "$bytes" -lt "$min" ]; then
    why="the budget, $bytes bytes, is under HEADROOM_BUDGET_MIN=$min"
    return 1
  fi
  case $template in
    *'{gib}'*)
      if [ $((bytes / 1073741824)) -eq 0 ]; then
        why="the budget, $bytes bytes, is under 1 GiB and HEADROOM_BUDGET_ARG wants whole GiB"
        return 1
      fi ;;
  esac
  case $template in
    *'{mib}'*)
      if [ $((bytes / 1048576)) -eq 0 ]; then
        why="the budget, $bytes bytes, is under 1 MiB and HEADROOM_BUDGET_ARG wants whole MiB"
        return 1
      fi ;;
  esac
  return 0
}

start=$(date +%s)
said=""
attempts=0
while :; do
  attempts=$((attempts + 1))
  if ask; then break; fi
  if [ "$why" != "$said" ]; then
    say "waiting for a budget (attempt $attempts): $why"
    said=$why
  fi
  if [ "$timeout" -gt 0 ] && [ $(($(date +%s) - start)) -ge "$timeout" ]; then
    say "no valid budget from $agent after ${timeout} s ($attempts attempts); not starting $1 on a guessed one. Last: $why"
    exit 75
  fi
  sleep "$retry"
done

export HEADROOM_BUDGET_BYTES="$bytes" HEADROOM_MARGIN_BYTES="$margin" HEADROOM_BUDGET_GENERATION="$generation"
if [ -n "$template" ]; then
  arg=$(printf '%s\n' "$template" | sed -e "s/{bytes}/$bytes/g" -e "s/{mib}/$((bytes / 1048576))/g" \
    -e "s/{gib}/$((bytes / 1073741824))/g")
  set -- "$@" "$arg"
fi
say "budget $bytes bytes ($((bytes / 1073741824)) GiB), margin $margin bytes, generation $generation from $agent after $attempts attempt(s): exec $*"
exec "$@"
