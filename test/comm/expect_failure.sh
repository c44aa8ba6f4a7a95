#!/usr/bin/env bash
# Runs a command that must fail: passes when it exits non-zero within MAX_SECONDS and its output
# matches REGEX (grep -E); exit 77 (skipped) passes through. A hard `timeout` keeps ctest from
# hanging even if the command does.
# Usage: expect_failure.sh MAX_SECONDS REGEX COMMAND [ARGS...]
set -u
max_seconds=$1
regex=$2
shift 2
start=$(date +%s)
hard_limit=$((max_seconds + 10))
output=$(timeout --kill-after=5 "$hard_limit" "$@" 2>&1)
rc=$?
elapsed=$(($(date +%s) - start))
printf '%s\n' "$output"
echo "expect_failure: exit code $rc after ${elapsed} s"
if ((rc == 77)) && grep -q "SKIPPED" <<<"$output"; then
  exit 77
fi
if ((rc == 0)); then
  echo "expect_failure: FAIL: the command succeeded, a failure was expected"
  exit 1
fi
# mpiexec itself may exit 137 when a rank was killed; only the time tells a hang apart.
if ((rc == 124 || (rc == 137 && elapsed >= hard_limit))); then
  echo "expect_failure: FAIL: the command hung and was killed"
  exit 1
fi
if ((elapsed > max_seconds)); then
  echo "expect_failure: FAIL: took ${elapsed} s, more than ${max_seconds} s"
  exit 1
fi
if ! grep -Eq "$regex" <<<"$output"; then
  echo "expect_failure: FAIL: no output line matches: $regex"
  exit 1
fi
echo "expect_failure: PASS"
