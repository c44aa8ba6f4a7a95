#!/usr/bin/env python3
"""Unit tests of bench/sass_hotspots.py on a synthetic `ncu --page source --csv --print-source sass`
file: the opcode and region shares, the hottest line with its context, only the first kernel's
table read, gzip input, and the one-message failures (a missing file, a file without SASS rows)."""
import csv
import gzip
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                      "sass_hotspots.py")
HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)",
          "Warp Stall Sampling (Not-issued Samples)", "Instructions Executed"]
# (SASS, stall samples, instructions): a load phase that ends at the async copies' commit, a
# compute phase whose hottest line waits on an earlier load, ending at a barrier.
KERNEL = [
    ("LDGSTS.E.128 [R1], desc[UR4][R2.64]", 2, 100),
    ("IMAD R3, R4, R5, RZ", 0, 100),
    ("LDGDEPBAR", 0, 100),
    ("LDG.E R6, desc[UR4][R8.64]", 1, 100),
    ("IMAD R7, R3, R3, RZ", 0, 200),
    ("@P0   FADD R9, R6, R7", 90, 100),
    ("FADD R9, R9, R9", 7, 100),
    ("BAR.SYNC.DEFER_BLOCKING 0x0", 0, 200),
]


def write_csv(path, kernels, opener=open):
    with opener(path, "wt", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        for name, lines in kernels:
            w.writerow(["Kernel Name", name])
            w.writerow(HEADER)
            for i, (text, stalls, count) in enumerate(lines):
                w.writerow([hex(0x1000 + 16 * i), text, stalls, stalls, count])


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


class SassHotspotsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "k.csv")
        # A second kernel after the first, with other numbers: it must not be counted.
        write_csv(self.path, [("k1(Params)", KERNEL), ("k2(Params)", [("FMUL R1, R2, R3", 5, 999)])])

    def tearDown(self):
        self.dir.cleanup()

    def test_tables(self):
        r = run(self.path, "--lines", "1", "--context", "2")
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout
        self.assertIn("k1(Params): 8 SASS lines, 1,000 warp instructions, 100 stall samples", out)
        self.assertNotIn("FMUL", out)
        # IMAD: 300 of 1000 instructions, 0 stalls; FADD (the guard dropped): 200 and 97.
        self.assertIn("| IMAD | 30.0% | 0.0% |", out)
        self.assertIn("| FADD | 20.0% | 97.0% |", out)
        # Two regions: lines 0-2 (300 instructions, 2 samples), 3-7 (700, 98).
        self.assertIn("| 0-2 | 30.0% | 2.0% | `LDGDEPBAR` |", out)
        self.assertIn("| 3-7 | 70.0% | 98.0% | `BAR.SYNC.DEFER_BLOCKING 0x0` |", out)
        # The hottest line and the two before it, the load it waits on among them.
        self.assertIn("line 5: 90 samples (90%)", out)
        self.assertIn("LDG.E R6", out)
        self.assertIn(">     5     90  @P0   FADD R9, R6, R7", out)
        self.assertNotIn("line 6:", out)

    def test_gzip_input_reads_the_same(self):
        gz = self.path + ".gz"
        write_csv(gz, [("k1(Params)", KERNEL)], opener=gzip.open)
        self.assertEqual(run(gz).stdout, run(self.path).stdout)

    def test_missing_file_fails_with_one_message(self):
        r = run(os.path.join(self.dir.name, "absent.csv"))
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stdout, "")
        self.assertEqual(len(r.stderr.strip().splitlines()), 1)
        self.assertIn("absent.csv", r.stderr)

    def test_file_without_sass_rows_fails_with_one_message(self):
        other = os.path.join(self.dir.name, "details.csv")
        with open(other, "w") as f:
            f.write('"ID","Kernel Name","Metric Name"\n"0","k1","Duration"\n')
        r = run(other)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1)
        self.assertIn("holds no SASS rows", r.stderr)


if __name__ == "__main__":
    unittest.main()
