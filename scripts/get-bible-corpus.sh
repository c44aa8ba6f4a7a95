#!/usr/bin/env bash
# Builds the English->Spanish Bible corpus on a Debian/Ubuntu machine from Debian's packages
# sword-text-web (World English Bible), sword-text-sparv (Reina-Valera 1909) and libsword-utils
# (mod2imp): dev = John, test = Acts, train = the other books. Public domain texts.
# Usage: scripts/get-bible-corpus.sh [OUT_DIR]   (default runs/data/bible-en-es)
# Offline machines use the copy in ../shared/data/bible-en-es instead.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/data/bible-en-es}
SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO="sudo"
if ! command -v mod2imp >/dev/null || [[ ! -d /usr/share/sword/modules/texts/ztext/engweb2015eb && ! -d /usr/share/sword/modules/texts/ztext/engWEB2015eb ]]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq sword-text-web sword-text-sparv libsword-utils >/dev/null
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mod2imp engWEB2015eb >"$tmp/en.imp"
mod2imp spaRV1909eb >"$tmp/es.imp"
python3 scripts/bible_corpus.py "$tmp/en.imp" "$tmp/es.imp" "$OUT"
echo "get-bible-corpus: wrote $OUT (train/dev/test .en/.es); prepare it with nmt-prep"
