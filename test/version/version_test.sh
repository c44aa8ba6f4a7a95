#!/usr/bin/env bash
# Every tool's --version: exit 0, first line "TOOL VERSION (commit COMMIT)" with the project version
# and the commit of this checkout (git rev-parse; "unknown" outside a git checkout), then the build
# line and the CUDA runtime, cuBLAS and NCCL lines ("not linked by this tool" where not linked).
#   version_test.sh PROJECT_VERSION TOOL_BINARY...
set -uo pipefail
version=$1
shift
if head=$(git rev-parse --short=12 HEAD 2>/dev/null); then
  commit_pattern="$head(-dirty)?"
else
  commit_pattern="unknown"
fi
failures=0
for tool in "$@"; do
  name=$(basename "$tool")
  out=$("$tool" --version 2>&1)
  rc=$?
  first=$(head -n 1 <<<"$out")
  if ((rc != 0)) || ! grep -Eq "^$name $version \(commit $commit_pattern\)$" <<<"$first" ||
    ! grep -Eq "^built: " <<<"$out" || ! grep -Eq "^CUDA runtime " <<<"$out" ||
    ! grep -Eq "^cuBLAS " <<<"$out" || ! grep -Eq "^NCCL " <<<"$out"; then
    echo "FAIL: $name --version: exit $rc, output:"
    echo "$out"
    failures=$((failures + 1))
  else
    echo "ok: $first"
  fi
done
# nmt-train links all three: their versions, not "not linked".
for tool in "$@"; do
  [[ $(basename "$tool") == nmt-train ]] || continue
  if "$tool" --version | grep -q "not linked"; then
    echo "FAIL: nmt-train --version does not name every library:"
    "$tool" --version
    failures=$((failures + 1))
  fi
done
echo "$# tools, $failures failed"
((failures == 0))
