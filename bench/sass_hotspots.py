#!/usr/bin/env python3
"""Where one kernel's instructions and stalls are, from ncu's per-instruction source counters:
`ncu --section SourceCounters -k regex:KERNEL --launch-count 1 -o REPORT ...` then
`ncu -i REPORT.ncu-rep --page source --csv --print-source sass > FILE.csv` (bench/run-step.sh does
both with PROFILE_SOURCE=REGEX). Prints three tables: instructions executed and warp-stall samples
by opcode; by region, the straight runs of SASS between barriers, wgmma waits and the async
copies' commit points (so a region is one phase of the kernel: a tile load, a product, a softmax,
a store); and the SASS lines that hold the most stall samples, each with the lines before it
(where the value it waits on is often produced; a load further up shows in the region table).
Session 19 found three of the short attention kernels' slowdowns this way (docs/perf.md).

usage: sass_hotspots.py FILE.csv[.gz] [--top 12] [--lines 4] [--context 6] [--min-share 1.0]
Exit status: 0, or 1 with one message on stderr when the file is missing or holds no SASS rows.
"""
import argparse
import collections
import csv
import gzip
import sys

INSTRUCTIONS = "Instructions Executed"
STALLS = "Warp Stall Sampling (All Samples)"
# A region ends after an instruction whose text holds one of these.
REGION_ENDS = ("BAR.SYNC", "WARPGROUP.DEPBAR", "LDGDEPBAR", "DEPBAR.LE", "WARPSYNC")


class Line:
    def __init__(self, index, text, instructions, stalls):
        self.index, self.text, self.instructions, self.stalls = index, text, instructions, stalls

    @property
    def opcode(self):
        words = self.text.split()
        if words and words[0].startswith("@"):  # a predicate guard
            words = words[1:]
        return words[0].split(".")[0] if words else ""


def number(text):
    try:
        return int(float(text.replace(",", ""))) if text.strip() else 0
    except ValueError:
        return 0


def read_lines(path):
    """The SASS rows of the first kernel in the file, in address order, and the kernel's name."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    kernel, header, lines = "", None, []
    for row in rows:
        if not row:
            continue
        if row[0] == "Kernel Name":
            if header is not None:
                break  # the next kernel's table
            kernel = row[1] if len(row) > 1 else ""
            continue
        if header is None:
            if "Source" in row and INSTRUCTIONS in row:
                header = row
            continue
        if len(row) < len(header):
            continue
        lines.append(Line(len(lines), row[header.index("Source")].strip(),
                          number(row[header.index(INSTRUCTIONS)]),
                          number(row[header.index(STALLS)]) if STALLS in header else 0))
    return kernel, lines


def share(part, whole):
    return 100.0 * part / whole if whole else 0.0


def regions(lines):
    current = []
    for line in lines:
        current.append(line)
        if any(end in line.text for end in REGION_ENDS):
            yield current
            current = []
    if current:
        yield current


def top_opcodes(group, count):
    by_opcode = collections.Counter()
    for line in group:
        by_opcode[line.opcode] += line.instructions
    total = sum(by_opcode.values())
    return " ".join(f"{op} {share(n, total):.0f}%" for op, n in by_opcode.most_common(count) if n)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=12, help="opcodes listed")
    parser.add_argument("--lines", type=int, default=4, help="hottest stall lines listed")
    parser.add_argument("--context", type=int, default=6, help="lines shown before each")
    parser.add_argument("--min-share", type=float, default=1.0,
                        help="regions under this share of instructions and of stalls left out")
    args = parser.parse_args()
    try:
        kernel, lines = read_lines(args.csv)
    except OSError as e:
        print(f"sass_hotspots.py: {e}", file=sys.stderr)
        return 1
    total_instructions = sum(line.instructions for line in lines)
    if not lines or total_instructions == 0:
        print(f"sass_hotspots.py: {args.csv} holds no SASS rows with '{INSTRUCTIONS}' (ncu --page "
              "source --csv --print-source sass of a report with the SourceCounters section)",
              file=sys.stderr)
        return 1
    total_stalls = sum(line.stalls for line in lines)
    print(f"{kernel or 'kernel'}: {len(lines)} SASS lines, {total_instructions:,} warp instructions,"
          f" {total_stalls:,} stall samples")

    print("\n| opcode | instructions | stall samples |\n|---|---:|---:|")
    instructions, stalls = collections.Counter(), collections.Counter()
    for line in lines:
        instructions[line.opcode] += line.instructions
        stalls[line.opcode] += line.stalls
    for op, n in instructions.most_common(args.top):
        print(f"| {op} | {share(n, total_instructions):.1f}% | {share(stalls[op], total_stalls):.1f}% |")

    print("\n| SASS lines | instructions | stall samples | ends with | its opcodes |\n|---|---:|---:|---|---|")
    for group in regions(lines):
        n = sum(line.instructions for line in group)
        s = sum(line.stalls for line in group)
        if share(n, total_instructions) < args.min_share and share(s, total_stalls) < args.min_share:
            continue
        print(f"| {group[0].index}-{group[-1].index} | {share(n, total_instructions):.1f}% | "
              f"{share(s, total_stalls):.1f}% | `{group[-1].text[:48]}` | {top_opcodes(group, 5)} |")

    print("\nThe lines with the most stall samples (a line waits on a value produced above it):")
    for hot in sorted(lines, key=lambda line: -line.stalls)[:args.lines]:
        if hot.stalls == 0:
            break
        print(f"\nline {hot.index}: {hot.stalls} samples ({share(hot.stalls, total_stalls):.0f}%)")
        for line in lines[max(0, hot.index - args.context):hot.index + 1]:
            mark = ">" if line is hot else " "
            print(f"  {mark} {line.index:5d} {line.stalls:6d}  {line.text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
