#!/usr/bin/env bash
# Downloads and prepares WMT16 English->German (about 4.5M pairs: Europarl v7, Common Crawl, News
# Commentary v11; dev newstest2013, test newstest2014) for machines with internet access, then
# runs nmt-prep with a joint 32k SentencePiece BPE vocabulary (the OpenSeq2Seq/Transformer-base
# setting). It needs ~10 GB of disk and wget, tar, python3 with sacrebleu (for the test sets).
# It cannot run on the offline development and GPU machines of this project; it is written from the
# published file names and has not been run end to end here.
# Usage: scripts/get-wmt16-en-de.sh [OUT_DIR]   (default runs/data/wmt16-en-de)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/data/wmt16-en-de}
BUILD_DIR=${BUILD_DIR:-build}
mkdir -p "$OUT/raw"
cd "$OUT/raw"
fetch() { [[ -f "$(basename "$1")" ]] || wget -q --show-progress "$1"; }
fetch https://www.statmt.org/europarl/v7/de-en.tgz
fetch https://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz
fetch https://data.statmt.org/wmt16/translation-task/training-parallel-nc-v11.tgz
for f in de-en.tgz training-parallel-commoncrawl.tgz training-parallel-nc-v11.tgz; do tar xzf "$f"; done
cat europarl-v7.de-en.en commoncrawl.de-en.en training-parallel-nc-v11/news-commentary-v11.de-en.en >../train.en
cat europarl-v7.de-en.de commoncrawl.de-en.de training-parallel-nc-v11/news-commentary-v11.de-en.de >../train.de
cd ..
sacrebleu -t wmt13 -l en-de --echo src >dev.en
sacrebleu -t wmt13 -l en-de --echo ref >dev.de
sacrebleu -t wmt14 -l en-de --echo src >test.en
sacrebleu -t wmt14 -l en-de --echo ref >test.de
cd - >/dev/null
"$BUILD_DIR/apps/nmt-prep/nmt-prep" --train-src "$OUT/train.en" --train-tgt "$OUT/train.de" \
  --dev-src "$OUT/dev.en" --dev-tgt "$OUT/dev.de" --out "$OUT/prep" --vocab-size 32000 \
  --input-sentence-size 2000000 --max-len 256
echo "get-wmt16-en-de: prepared $OUT/prep; train with configs/transformer-base.json --set data.train=$OUT/prep --set data.dev=$OUT/prep"
