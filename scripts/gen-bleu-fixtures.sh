#!/usr/bin/env bash
# Regenerates test/bleu/fixtures: the hypothesis variants of the dev sets and sacreBLEU's scores
# for them (test/bleu/sacrebleu_oracle.py), so the BLEU tests also run where Python or sacreBLEU is
# absent. The per-code-point tokenizer and lower() sweeps are left out to keep the fixture small;
# they are checked whenever sacreBLEU is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
out=test/bleu/fixtures
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 test/bleu/sacrebleu_oracle.py --data ../shared/data --out "$tmp"
rm -rf "$out"
mkdir -p "$out"
cp "$tmp"/*.txt "$out"/
python3 - "$tmp" "$out" <<'PY'
import json, sys
tmp, out = sys.argv[1], sys.argv[2]
data = json.load(open(f"{tmp}/expected.json", encoding="utf-8"))
def relocate(value):
    if isinstance(value, str) and value.startswith(tmp + "/"):
        return out + value[len(tmp):]
    if isinstance(value, list):
        return [relocate(v) for v in value]
    if isinstance(value, dict):
        return {k: relocate(v) for k, v in value.items()}
    return value
data = relocate(data)
# The code-point sweeps (lines of thousands of characters) stay out of the fixture.
data["tokenize"] = [e for e in data["tokenize"] if len(e["line"]) < 1000]
data["lower"] = [e for e in data["lower"] if len(e["line"]) < 1000]
with open(f"{out}/expected.json", "w", encoding="utf-8") as f:
    json.dump(data, f, ensure_ascii=False, indent=0)
PY
echo "wrote $out ($(du -sh "$out" | cut -f1))"
