#!/usr/bin/env python3
"""Converts an `nmt-export --format marian` directory into a CTranslate2 model directory.

usage: ct2_nmt_converter.py --export DIR --output_dir DIR [--quantization TYPE] [--force]

The weights go through CTranslate2's own Marian converter (ctranslate2.converters.MarianConverter:
model.npz + vocab.yml, every name and layout as it reads Marian models). Three settings of the
converted model are then taken from the export's export.json, because our Transformer differs from
Marian's there (docs/export.md):
  * the decoder's first input is the embedding of <s> (Marian: a zero vector),
  * the source gets no </s> appended (Marian appends one),
  * the layer norm epsilon is model.layernorm_eps (the converter leaves CTranslate2's default).
The position table travels in model.npz ("Wpos"), so no setting is needed for it. The vocabulary
file (sentencepiece.model) is copied next to the converted model.
Exit codes: 0 converted; 1 conversion error; 2 usage error or ctranslate2 not installed.
"""
import argparse
import json
import os
import shutil
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--export", required=True, help="directory nmt-export wrote")
    parser.add_argument("--output_dir", required=True, help="CTranslate2 model directory to write")
    parser.add_argument("--quantization", default=None,
                        help="weight type of the converted model (int8, float16, ...; "
                             "default: float32, as exported)")
    parser.add_argument("--force", action="store_true", help="replace an existing output_dir")
    args = parser.parse_args()

    try:
        from ctranslate2.converters.marian import MarianConverter
    except ImportError as e:
        print(f"ct2_nmt_converter.py: ctranslate2 is not installed ({e}): "
              "python3 -m pip install 'ctranslate2>=4,<5'", file=sys.stderr)
        return 2

    info_path = os.path.join(args.export, "export.json")
    try:
        with open(info_path, encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, ValueError) as e:
        print(f"ct2_nmt_converter.py: cannot read {info_path}: {e}", file=sys.stderr)
        return 2
    if info.get("format") != "nmt-export" or info.get("target") != "marian-npz":
        print(f"ct2_nmt_converter.py: {info_path} is not an nmt-export --format marian export",
              file=sys.stderr)
        return 2
    settings = info["ctranslate2"]

    class NmtMarianConverter(MarianConverter):
        def _load(self):
            spec = super()._load()
            spec.decoder.start_from_zero_embedding = settings["decoder_start_from_zero_embedding"]
            spec.config.add_source_eos = settings["add_source_eos"]
            spec.config.decoder_start_token = settings["decoder_start_token"]
            spec.config.layer_norm_epsilon = settings["layer_norm_epsilon"]
            return spec

    vocab_yml = os.path.join(args.export, "vocab.yml")
    converter = NmtMarianConverter(os.path.join(args.export, "model.npz"), [vocab_yml, vocab_yml])
    try:
        converter.convert(args.output_dir, quantization=args.quantization, force=args.force)
        vocab_file = info["vocabulary"]["file"]
        shutil.copyfile(os.path.join(args.export, vocab_file),
                        os.path.join(args.output_dir, vocab_file))
    except Exception as e:  # the converter raises several kinds; one message either way
        print(f"ct2_nmt_converter.py: conversion failed: {e}", file=sys.stderr)
        return 1
    print(f"ct2_nmt_converter.py: wrote {args.output_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
