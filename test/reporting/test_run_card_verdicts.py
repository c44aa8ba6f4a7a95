#!/usr/bin/env python3
"""Unit tests of scripts/run_card_verdicts.py on synthetic curves: a plateau, a still-rising
curve, a falling one, a noisy short one, an overfitting curve, a network-bound profile, the
learning-rate schedules against engine/train/lr_schedule.cpp's formulas, and the statistics."""
import math
import os
import random
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import run_card_verdicts as v  # noqa: E402

STEPS = list(range(500, 6001, 500))  # twelve evaluations, as the Bible config's


def noisy(values, sigma, seed=1):
    rng = random.Random(seed)
    return [x + rng.gauss(0, sigma) for x in values]


class TrendTest(unittest.TestCase):
    def test_exact_line(self):
        t = v.linear_trend([1000, 2000, 3000, 4000], [1.0, 3.0, 5.0, 7.0])
        self.assertAlmostEqual(t.slope_per_1k, 2.0)
        self.assertAlmostEqual(t.ci95_per_1k, 0.0)
        self.assertAlmostEqual(t.value_at(5000), 9.0)
        self.assertTrue(t.significant())

    def test_confidence_interval_matches_textbook(self):
        # x = 0,1,2,3,4 (thousands), residuals known: slope 1, SE = sqrt(SSE/3/Sxx).
        ys = [0.1, 0.9, 2.1, 2.9, 4.0]
        t = v.linear_trend([0, 1000, 2000, 3000, 4000], ys)
        sxx = 10.0
        slope = sum((x - 2) * (y - sum(ys) / 5) for x, y in zip(range(5), ys)) / sxx
        intercept = sum(ys) / 5 - 2 * slope
        sse = sum((y - intercept - slope * x) ** 2 for x, y in zip(range(5), ys))
        self.assertAlmostEqual(t.slope_per_1k, slope)
        self.assertAlmostEqual(t.ci95_per_1k, 3.182 * math.sqrt(sse / 3 / sxx))

    def test_two_points_have_no_interval(self):
        t = v.linear_trend([0, 1000], [1.0, 2.0])
        self.assertTrue(math.isinf(t.ci95_per_1k))
        self.assertIsNone(v.linear_trend([5], [1.0]))
        self.assertIsNone(v.linear_trend([5, 5], [1.0, 2.0]))

    def test_percentile_matches_numpy_linear(self):
        self.assertEqual(v.percentile([1, 2, 3, 4, 5], 50), 3)
        self.assertAlmostEqual(v.percentile([1, 2, 3, 4], 95), 3.85)
        self.assertAlmostEqual(v.percentile(list(range(101)), 10), 10)
        self.assertIsNone(v.percentile([], 10))


class FullyTrainedTest(unittest.TestCase):
    def test_plateau(self):
        bleu = noisy([30 - 20 * math.exp(-s / 800) for s in STEPS], 0.15)
        loss = noisy([3.0 + 2 * math.exp(-s / 800) for s in STEPS], 0.005)
        verdict = v.fully_trained_verdict(STEPS, bleu, "dev BLEU", STEPS, loss)
        self.assertEqual(verdict.numbers["score"].label, "plateaued")
        self.assertEqual(verdict.label, "plateaued")
        self.assertIn("Yes", verdict.sentence)

    def test_still_rising(self):
        bleu = noisy([5 + 4 * s / 1000 for s in STEPS], 0.2)  # +4 BLEU per 1k steps
        loss = noisy([6 - 0.3 * s / 1000 for s in STEPS], 0.01)
        verdict = v.fully_trained_verdict(STEPS, bleu, "dev BLEU", STEPS, loss)
        self.assertEqual(verdict.label, "still improving")
        trend = verdict.numbers["score"].numbers["trend"]
        self.assertAlmostEqual(trend.slope_per_1k, 4.0, delta=0.5)
        self.assertEqual(trend.first_step, 3500)  # the last half of twelve evaluations
        self.assertIn("No", verdict.sentence)

    def test_getting_worse(self):
        bleu = [30 - 1.5 * s / 1000 for s in STEPS]
        verdict = v.fully_trained_verdict(STEPS, bleu, "dev BLEU", STEPS, [3.0] * len(STEPS))
        self.assertEqual(verdict.label, "getting worse")

    def test_significant_but_negligible_drift_is_a_plateau(self):
        bleu = [30 + 0.01 * s / 1000 for s in STEPS]  # exact line: significant, 0.025 BLEU
        verdict = v.progress_verdict(STEPS, bleu, "dev BLEU", True, min_change=0.3)
        self.assertTrue(verdict.numbers["trend"].significant())
        self.assertEqual(verdict.label, "plateaued")

    def test_noisy_few_points_are_uncertain(self):
        verdict = v.progress_verdict([10, 20, 30, 40], [7.5, 6.7, 6.3, 6.2], "dev loss", False,
                                     min_change=0.065)
        self.assertEqual(verdict.label, "uncertain")

    def test_too_few(self):
        verdict = v.fully_trained_verdict([100, 200], [1.0, 2.0], "dev BLEU", [100], [5.0])
        self.assertEqual(verdict.label, "too few evaluations")


class OverfittingTest(unittest.TestCase):
    TRAIN = list(range(100, 6001, 100))

    def test_overfitting_curve(self):
        train = [2.0 + 3 * math.exp(-s / 700) - 0.05 * s / 1000 for s in self.TRAIN]
        dev = [2.4 + 3 * math.exp(-s / 700) + 0.08 * max(0, s - 2500) / 1000 for s in STEPS]
        verdict = v.overfitting_verdict(self.TRAIN, train, STEPS, dev)
        self.assertEqual(verdict.label, "overfitting")
        best = verdict.numbers["best_step"]
        self.assertTrue(2000 <= best <= 3500, best)
        self.assertGreater(verdict.numbers["gap_trend"].slope_per_1k, 0)
        self.assertIn("kept falling", verdict.sentence)

    def test_healthy_curve(self):
        train = [3.0 + 3 * math.exp(-s / 900) for s in self.TRAIN]
        dev = [2.8 + 3 * math.exp(-s / 900) for s in STEPS]
        verdict = v.overfitting_verdict(self.TRAIN, train, STEPS, dev)
        self.assertEqual(verdict.label, "not overfitting")
        self.assertEqual(verdict.numbers["best_step"], 6000)
        self.assertAlmostEqual(verdict.numbers["gap_last"], -0.2, places=6)

    def test_widening_gap_with_flat_dev_loss(self):
        train = [3.0 - 0.2 * s / 1000 for s in self.TRAIN]
        dev = [3.0 + (0.002 if i % 2 else -0.002) for i, _ in enumerate(STEPS)]
        dev[-1] = 3.001  # not a new minimum at the end
        verdict = v.overfitting_verdict(self.TRAIN, train, STEPS, dev)
        self.assertEqual(verdict.label, "starting to overfit")

    def test_new_minimum_at_the_end_is_not_overfitting(self):
        train = [3.0 - 0.5 * s / 1000 for s in self.TRAIN]
        dev = [3.0 - 0.01 * s / 1000 for s in STEPS]
        self.assertEqual(v.overfitting_verdict(self.TRAIN, train, STEPS, dev).label,
                         "not overfitting")


class GpuTest(unittest.TestCase):
    def test_split_cpu_takes_data_out_of_compute(self):
        split = v.step_split(100, 90, 5, 3, 10, "cpu")
        self.assertEqual(split, {"compute": 85, "exposed communication": 3, "data": 10,
                                 "host and other": 2})
        self.assertEqual(v.step_split(100, 90, 5, 3, 10, "cuda")["compute"], 95)

    def test_verdicts(self):
        split = v.step_split(100, 80, 5, 10, 1, "cuda")
        full = v.gpu_verdict([{"name": "0", "mean": 95, "p10": 88}], split)
        self.assertEqual(full.label, "fully utilised")
        dips = v.gpu_verdict([{"name": "0", "mean": 95, "p10": 88},
                              {"name": "1", "mean": 93, "p10": 40}], split)
        self.assertEqual(dips.label, "mostly utilised")
        low = v.gpu_verdict([{"name": "0", "mean": 45, "p10": 10}], split)
        self.assertEqual(low.label, "under-utilised")
        self.assertEqual(low.numbers["largest_other"], "exposed communication")
        self.assertEqual(v.gpu_verdict([], split).label, "no GPU")
        self.assertEqual(v.gpu_verdict([{"name": "0", "mean": None}], split).label, "unknown")


class NetworkTest(unittest.TestCase):
    def test_saving_model(self):
        # 40 ms of exchange, 10 hidden behind backward, 30 exposed.
        self.assertAlmostEqual(v.faster_network_saving_ms(40, 30, math.inf), 30)
        self.assertAlmostEqual(v.faster_network_saving_ms(40, 30, 2), 20)  # 20 - 10 exposed
        self.assertAlmostEqual(v.faster_network_saving_ms(40, 5, 2), 5)  # all hidden then
        self.assertEqual(v.faster_network_saving_ms(40, 0, 2), 0)

    def test_network_bound_profile(self):
        profile = {"world_size": 16, "hosts": 2, "step_ms": 100, "comm_ms": 45,
                   "exposed_comm_ms": 35, "bytes_per_step": 193e6, "probe_busbw_gb_per_s": 10,
                   "nic_peak_fraction": 0.93, "steps": 1000}
        verdict = v.network_verdict(profile)
        self.assertEqual(verdict.label, "network-bound")
        n = verdict.numbers
        self.assertAlmostEqual(n["exposed_fraction"], 0.35)
        self.assertAlmostEqual(n["busbw_gb_per_s"], 193e6 / 0.045 / 1e9 * 2 * 15 / 16)
        self.assertAlmostEqual(n["fraction_of_probe"], n["busbw_gb_per_s"] / 10)
        self.assertAlmostEqual(n["saving_2x_ms"], 22.5)
        self.assertAlmostEqual(n["saving_infinite_run_s"], 35.0)
        self.assertIn("between nodes", verdict.sentence)
        self.assertIn("93%", verdict.sentence)

    def test_compute_bound_and_single(self):
        profile = {"world_size": 8, "hosts": 1, "step_ms": 100, "comm_ms": 30,
                   "exposed_comm_ms": 2, "bytes_per_step": 193e6}
        self.assertEqual(v.network_verdict(profile).label, "not network-bound")
        profile["exposed_comm_ms"] = 8
        self.assertEqual(v.network_verdict(profile).label, "partly network-bound")
        self.assertEqual(v.network_verdict({"world_size": 1}).label, "single process")


class LearningRateTest(unittest.TestCase):
    def test_inverse_sqrt(self):
        sched = {"policy": "inverse_sqrt", "learning_rate": 2e-3, "warmup_steps": 800,
                 "warmup_init_lr": 0.0}
        self.assertAlmostEqual(v.learning_rate_at(sched, 512, 400), 1e-3)
        self.assertAlmostEqual(v.learning_rate_at(sched, 512, 800), 2e-3)
        self.assertAlmostEqual(v.learning_rate_at(sched, 512, 3200), 1e-3)
        sentence, formula, peak, peak_step = v.describe_schedule(sched, 512, 6000)
        self.assertEqual((peak, peak_step), (2e-3, 800))
        self.assertIn("3,200", sentence)  # half the peak at 4 x warmup
        self.assertIn("√(800/step)", formula)

    def test_transformer_policy_peak(self):
        sched = {"policy": "transformer_policy", "learning_rate": 2.0, "warmup_steps": 4000}
        _, _, peak, step = v.describe_schedule(sched, 512, 100000)
        self.assertEqual(step, 4000)
        self.assertAlmostEqual(peak, 2.0 / math.sqrt(512) / math.sqrt(4000))
        self.assertLess(v.learning_rate_at(sched, 512, 3999), peak)
        self.assertLess(v.learning_rate_at(sched, 512, 4001), peak)

    def test_cosine_and_linear_decay_to_the_planned_end(self):
        for policy in ("cosine", "linear"):
            sched = {"policy": policy, "learning_rate": 2e-3, "warmup_steps": 100,
                     "warmup_init_lr": 0.0, "decay_steps": 0, "final_lr": 2e-4}
            self.assertAlmostEqual(v.learning_rate_at(sched, 512, 50, 300), 1e-3)
            self.assertAlmostEqual(v.learning_rate_at(sched, 512, 200, 300), 1.1e-3)
            self.assertAlmostEqual(v.learning_rate_at(sched, 512, 300, 300), 2e-4)
            self.assertAlmostEqual(v.learning_rate_at(sched, 512, 900, 300), 2e-4)
            sentence, formula, peak, peak_step = v.describe_schedule(sched, 512, 300)
            self.assertEqual((peak, peak_step), (2e-3, 100))
            self.assertIn(policy, sentence)
            self.assertIn("(300 − 100)", formula)
        sched["decay_steps"] = 250  # the end named, not the run's
        self.assertAlmostEqual(v.learning_rate_at(sched, 512, 250, 300), 2e-4)
        with self.assertRaises(ValueError):
            v.learning_rate_at(dict(sched, decay_steps=0), 512, 150)  # no end known

    def test_constant(self):
        sched = {"policy": "constant", "learning_rate": 1e-4, "warmup_steps": 0}
        self.assertEqual(v.learning_rate_at(sched, 512, 77), 1e-4)
        self.assertIn("Constant", v.describe_schedule(sched, 512, 10)[0])


if __name__ == "__main__":
    unittest.main()
