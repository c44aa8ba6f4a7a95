#!/usr/bin/env python3
"""Unit tests of bench/step_kernels.py (bench/run-step.sh's per-kernel table) on synthetic ncu CSVs
in the layout `ncu --csv --print-units base --metrics ...` writes: times summed per kernel name and
per step, the names shortened, kinds, the DRAM columns (MB a launch, TB/s) where the CSV has the byte
metrics and not where it has none, a baseline's change column, the JSON, and the one-message
failures (a missing file, a file without a header, a file without times)."""
import csv
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                      "step_kernels.py")
HEADER = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
          "Block Size", "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit",
          "Metric Value"]
ADAM = "void nmt::<unnamed>::adam_kernel<4, __nv_bfloat16>(float *, const float *, float *)"
GEMM = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
LAYERNORM = ("void nmt::cuda::(anonymous namespace)::layernorm_backward_rows<__nv_bfloat16, 8, 2, "
             "(nmt::cuda::(anonymous namespace)::BackwardTail)2>(const T1 *, long, int)")


def ncu_csv(launches):
    """launches: (kernel name, [(metric, unit, value), ...]) in launch order -> the CSV text, after
    the lines ncu and the program print before it."""
    out = io.StringIO()
    out.write("==PROF== Connected to process 1 (bench-step)\n  step ms: median 8.4\n")
    w = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerow(HEADER)
    for i, (name, metrics) in enumerate(launches):
        for metric, unit, value in metrics:
            w.writerow([i, 1, "bench-step", "127.0.0.1", name, 1, 13, "(256, 1, 1)", "(528, 1, 1)",
                        0, "9.0", "Command line profiler metrics", metric, unit, value])
    return out.getvalue()


def timed(name, ns, read=None, write=None, unit="byte"):
    metrics = [("gpu__time_duration.sum", "nsecond", f"{ns:,}")]
    if read is not None:
        metrics.append(("dram__bytes_read.sum", unit, read))
        metrics.append(("dram__bytes_write.sum", unit, write))
    return name, metrics


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def table_row(out, kernel):
    """The cells of the per-kernel table's row for `kernel` (its shortened name)."""
    for line in out.splitlines():
        if line.startswith(f"| `{kernel}`"):
            return [c.strip() for c in line.strip("|").split("|")]
    raise AssertionError(f"no row for {kernel} in:\n{out}")


class StepKernelsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, text):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_times_kinds_and_dram_columns(self):
        # Two steps: the GEMM twice a step (10 us, 30 MB read + 10 MB written a launch), Adam once
        # (600 us, 1.8 GB in Mbyte units), the LayerNorm backward with no byte values ncu could give.
        launches = []
        for _ in range(2):
            launches += [timed(GEMM, 10000, "30,000,000", "10,000,000"),
                         timed(GEMM, 10000, "30,000,000", "10,000,000"),
                         timed(ADAM, 600000, "1,200", "600", unit="Mbyte"),
                         timed(LAYERNORM, 16000, "n/a", "n/a")]
        path = self.write("ncu.csv", ncu_csv(launches))
        json_path = os.path.join(self.dir.name, "k.json")
        r = run(path, "--steps", "2", "--json", json_path)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout
        self.assertIn("GPU kernel time per step: 0.636 ms in 4 launches", out)
        self.assertIn("DRAM bytes read and written per step: 1880.0 MB", out)
        self.assertIn("| MB/launch | TB/s |", out)
        # GEMM: 40 MB a launch over 10 us = 4 TB/s; Adam: 1800 MB over 600 us = 3 TB/s.
        self.assertEqual(table_row(out, GEMM), [f"`{GEMM}`", "GEMM", "2.0", "0.020", "3.1%",
                                                "40.0", "4.00"])
        self.assertEqual(table_row(out, "adam_kernel<4, __nv_bfloat16>"),
                         ["`adam_kernel<4, __nv_bfloat16>`", "optimizer", "1.0", "0.600", "94.3%",
                          "1800.0", "3.00"])
        ln = table_row(out, "layernorm_backward_rows<__nv_bfloat16, 8, 2, (BackwardTail)2>")
        self.assertEqual(ln[1:5], ["layernorm", "1.0", "0.016", "2.5%"])
        self.assertEqual(ln[5:], ["", ""])  # no bytes: blank cells, not zeros
        self.assertIn("| optimizer | 1.0 | 0.600 | 94.3% |", out)
        with open(json_path) as f:
            data = json.load(f)
        self.assertAlmostEqual(data["ms_per_step"], 0.636)
        gemm = next(k for k in data["kernels"] if k["kernel"] == GEMM)
        self.assertAlmostEqual(gemm["dram_mb_per_launch"], 40.0)
        self.assertAlmostEqual(gemm["dram_tb_per_s"], 4.0)
        self.assertNotIn("dram_mb_per_launch",
                         next(k for k in data["kernels"] if k["kind"] == "layernorm"))

    def test_times_only_and_baseline(self):
        now = self.write("now.csv", ncu_csv([timed(GEMM, 20000), timed(ADAM, 500000)]))
        before = self.write("before.csv", ncu_csv([timed(GEMM, 25000), timed(LAYERNORM, 4000)]))
        r = run(now, "--baseline", before)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout
        self.assertNotIn("MB/launch", out)
        self.assertNotIn("DRAM bytes", out)
        self.assertIn("baseline: 0.029 ms in 2 launches", out)
        self.assertEqual(table_row(out, GEMM)[-2:], ["0.025", "-0.005"])
        # A kernel the baseline ran and this run did not still has its row.
        self.assertEqual(table_row(out, "layernorm_backward_rows<__nv_bfloat16, 8, 2, "
                                        "(BackwardTail)2>")[2:4], ["0.0", "0.000"])

    def test_failures(self):
        r = run(os.path.join(self.dir.name, "missing.csv"))
        self.assertEqual(r.returncode, 1)
        self.assertTrue(r.stderr.startswith("step_kernels.py: "), r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1)
        r = run(self.write("table.md", "| kernel | ms |\n"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("no ncu CSV header", r.stderr)
        r = run(self.write("bytes.csv", ncu_csv([(GEMM, [("dram__bytes_read.sum", "byte", "5")])])))
        self.assertEqual(r.returncode, 1)
        self.assertIn("no gpu__time_duration.sum values", r.stderr)
        r = run(self.write("ok.csv", ncu_csv([timed(GEMM, 1000)])), "--steps", "0")
        self.assertEqual(r.returncode, 1)
        self.assertIn("--steps must be at least 1", r.stderr)


if __name__ == "__main__":
    unittest.main()
