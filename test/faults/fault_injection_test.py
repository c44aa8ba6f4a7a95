#!/usr/bin/env python3
"""Fault injection: the faults a multi-day, multi-node run meets, done on purpose (issue 15).

Each case checks what the tools promise: one clear message naming the thing, the documented exit
code (0 ok, 1 runtime error, 2 usage or config error; nmt-train 130 after SIGINT), nothing
half-written, earlier checkpoints intact and resumable. Groups (--group, repeatable):
  signals  repeated SIGTERM (back to back, 50 ms apart, to every thread, via timeout), SIGINT once
           and twice
  lock     two runs in one checkpoint.dir; a stale lock after kill -9 does not block --resume
  diverge  NaN weights in a checkpoint; a run whose steps all turn non-finite; a save of NaN weights
  json     deeply nested and very long values in a config and in state.json
  vocab    shards vs spm.model, dev set vs training data, compared by fingerprint at start-up
  prep     nmt-prep publishes a directory atomically, removes staging left by killed runs, refuses
           empty training text
  misc     train.device=cuda without a GPU, nmt-bleu writing to a full device, report.json without
           vocab, command-line usage errors
--device cuda trains on the GPU (signals, lock, diverge); it exits 77 (skipped) without one.
Standard library only; binaries come from the command line (ctest passes the built ones).
"""
import argparse
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import zlib

ARGS = None
TMP = None
RESULTS = {"passed": 0, "failed": 0}
SKIP = 77


# ---------------------------------------------------------------------------------------------
# helpers


def check(name, condition, detail=""):
    if condition:
        RESULTS["passed"] += 1
        print("ok: " + name)
    else:
        RESULTS["failed"] += 1
        print("FAIL: " + name + ("\n    " + detail.replace("\n", "\n    ") if detail else ""))
    return condition


def run(cmd, timeout=120, env=None, stdout=None, stdin_text=""):
    full_env = dict(os.environ)
    full_env.update(env or {})
    try:
        p = subprocess.run(cmd, stdout=stdout or subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, errors="replace", timeout=timeout, env=full_env,
                           input=stdin_text)
    except subprocess.TimeoutExpired as e:
        return "timed out after %d s" % timeout, str(e.stdout or "")[-1500:], ""
    return p.returncode, (p.stdout or "") if stdout is None else "", p.stderr


def describe(rc, out, err):
    return "exit %s\nstdout: %s\nstderr: %s" % (rc, out[-1500:], err[-1500:])


def error_lines(err):
    return [l for l in err.splitlines() if l.strip()]


TINY = {
    "model": {"encoder_layers": 1, "decoder_layers": 1, "d_model": 32, "num_heads": 4,
              "ffn_dim": 64, "dropout": 0.0, "attention_dropout": 0.0, "relu_dropout": 0.0,
              "max_positions": 64},
    "data": {"train": "synthetic:reverse", "max_src_len": 16, "max_tgt_len": 16,
             "synthetic_vocab": 16, "synthetic_min_len": 2, "synthetic_max_len": 8,
             "synthetic_train_pairs": 2000, "synthetic_dev_pairs": 40},
    "train": {"max_steps": 1000000, "batch_tokens": 512, "device": "cpu", "precision": "fp32",
              "threads": 2},
    "lr_schedule": {"policy": "inverse_sqrt", "learning_rate": 0.003, "warmup_steps": 10},
    "eval": {"every_steps": 0},
    "log": {"every_steps": 1},
    "checkpoint": {"keep": 0},
}


def tiny_config(name, **sections):
    cfg = json.loads(json.dumps(TINY))
    if ARGS.device == "cuda":
        cfg["train"]["device"] = "cuda"
        cfg["train"]["precision"] = "bf16"
    for section, values in sections.items():
        cfg.setdefault(section, {}).update(values)
    path = os.path.join(TMP, name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


class Trainer:
    """nmt-train in the background; waits for lines of its stdout."""

    def __init__(self, config, *extra, env=None):
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen([ARGS.train, "--config", config] + list(extra),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     errors="replace", env=full_env, start_new_session=True)
        self.lines = []

    def wait_for(self, prefix, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                return False
            self.lines.append(line)
            if line.startswith(prefix):
                return True
        return False

    def finish(self, timeout=120):
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        return self.proc.returncode, "".join(self.lines) + out, err


def checkpoints(ckpt_dir):
    if not os.path.isdir(ckpt_dir):
        return []
    return sorted(int(n[5:]) for n in os.listdir(ckpt_dir)
                  if n.startswith("ckpt-") and n[5:].isdigit())


def leftovers(ckpt_dir):
    return [n for n in os.listdir(ckpt_dir) if ".tmp-" in n or ".old-" in n]


def resumes(config, ckpt_dir, step, name):
    """--resume continues from ckpt-<step> and trains two more steps."""
    rc, out, err = run([ARGS.train, "--config", config, "--resume",
                        "--set", "train.max_steps=%d" % (step + 2)])
    check(name + ": resumes from ckpt-%d" % step,
          rc == 0 and ("resumed from %s/ckpt-%d" % (ckpt_dir, step)) in out, describe(rc, out, err))


def threads_of(pid):
    try:
        return [int(t) for t in os.listdir("/proc/%d/task" % pid)]
    except OSError:
        return []


def tgkill(pid, tid, sig):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(234 if os.uname().machine == "x86_64" else 131, pid, tid, sig)


# crc32c (Castagnoli), to rewrite state.json's checksum after changing a tensor on purpose.
_CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def crc32c(data):
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def poke_tensor(ckpt, file_name, tensor_name, value):
    """Writes `value` into element 0 of one tensor and fixes the checksum state.json records."""
    path = os.path.join(ckpt, file_name)
    data = bytearray(open(path, "rb").read())
    header_size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + header_size])
    begin = 8 + header_size + header[tensor_name]["data_offsets"][0]
    data[begin:begin + 4] = struct.pack("<f", value)
    open(path, "wb").write(data)
    state_path = os.path.join(ckpt, "state.json")
    state = json.load(open(state_path))
    state["files"][file_name]["crc32c"] = "0x%08x" % crc32c(bytes(data))
    json.dump(state, open(state_path, "w"), indent=2)


# ---------------------------------------------------------------------------------------------
# signals


def signal_case(name, send, expect_rc=0, expect_signal="SIGTERM"):
    ckpt = os.path.join(TMP, name, "ckpt")
    config = tiny_config(name, checkpoint={"dir": ckpt, "every_steps": 0, "keep": 0})
    t = Trainer(config)
    started = t.wait_for("step 3 ")
    send(t.proc)
    rc, out, err = t.finish()
    steps = checkpoints(ckpt)
    ok = check(name + ": exit %d after an orderly save" % expect_rc,
               started and rc == expect_rc and len(steps) == 1 and
               ("stopped by %s after step %d: saved %s/ckpt-%d" %
                (expect_signal, steps[0], ckpt, steps[0])) in out,
               describe(rc, out, err))
    if ok:
        check(name + ": no temporary directory left", not leftovers(ckpt), str(os.listdir(ckpt)))
        resumes(config, ckpt, steps[0], name)


def repeat(proc, sig, times, interval, group=False):
    """Sends `sig` `times` times, `interval` seconds apart, while the process lives. Signals sent
    before the process has run its handler merge into one, hence the spacing."""
    for i in range(times):
        if proc.poll() is not None:
            return
        try:
            (os.killpg if group else os.kill)(proc.pid, sig)
        except ProcessLookupError:
            return
        time.sleep(interval)


def test_signals():
    signal_case("sigterm-repeated", lambda p: repeat(p, signal.SIGTERM, 20, 0.005))
    signal_case("sigterm-50ms-apart", lambda p: repeat(p, signal.SIGTERM, 2, 0.05))
    # A scheduler signalling the whole process group (the launcher and the trainer).
    signal_case("sigterm-group-repeated",
                lambda p: repeat(p, signal.SIGTERM, 20, 0.005, group=True))

    # One SIGTERM to each thread (OpenMP, CUDA, NVML monitor): a signal may land on any of them.
    def every_thread(p):
        for tid in reversed(threads_of(p.pid)):
            tgkill(p.pid, tid, signal.SIGTERM)
            time.sleep(0.002)
    signal_case("sigterm-every-thread", every_thread)
    signal_case("sigint-once", lambda p: os.kill(p.pid, signal.SIGINT), expect_rc=130,
                expect_signal="SIGINT")

    # `timeout -s TERM` sends SIGTERM to the trainer and then to its process group.
    name = "timeout-term"
    ckpt = os.path.join(TMP, name, "ckpt")
    config = tiny_config(name, checkpoint={"dir": ckpt, "every_steps": 0})
    rc, out, err = run(["timeout", "--preserve-status", "-s", "TERM", "4", ARGS.train, "--config",
                        config], timeout=180)
    steps = checkpoints(ckpt)
    if check(name + ": exit 0 with a checkpoint",
             rc == 0 and len(steps) == 1 and "stopped by SIGTERM" in out, describe(rc, out, err)):
        resumes(config, ckpt, steps[0], name)

    # Ctrl-C twice: the person wants out now. The second SIGINT kills the process (one SIGINT
    # exits 130, see sigint-once); the checkpoints saved before are intact. On a fast GPU the
    # orderly save after the first SIGINT can finish before the second arrives, so whether
    # "stopped by SIGINT" was printed depends on timing; dying of SIGINT does not.
    name = "sigint-twice"
    ckpt = os.path.join(TMP, name, "ckpt")
    config = tiny_config(name, checkpoint={"dir": ckpt, "every_steps": 2})
    t = Trainer(config)
    started = t.wait_for("step 5 ")
    repeat(t.proc, signal.SIGINT, 400, 0.005)
    rc, out, err = t.finish()
    steps = checkpoints(ckpt)
    check(name + ": the second SIGINT ends the process at once",
          started and rc == -signal.SIGINT and steps,
          describe(rc, out, err))
    if steps:
        resumes(config, ckpt, steps[-1], name)


# ---------------------------------------------------------------------------------------------
# lock


def test_lock():
    name = "lock"
    ckpt = os.path.join(TMP, name, "ckpt")
    config = tiny_config(name, checkpoint={"dir": ckpt, "every_steps": 2})
    first = Trainer(config)
    started = first.wait_for("step 3 ")
    # (max_steps: a build without the lock would train; let it end soon.)
    rc, out, err = run([ARGS.train, "--config", config, "--set", "train.max_steps=6"])
    lines = error_lines(err)
    check(name + ": a second run in the same checkpoint.dir is refused, naming the holder",
          started and rc == 1 and len(lines) == 1 and "in use by another run" in lines[0] and
          ("pid %d" % first.proc.pid) in lines[0] and os.path.join(ckpt, ".lock") in lines[0],
          describe(rc, out, err))
    rc2, out2, err2 = run([ARGS.train, "--config", config, "--resume", "--set",
                           "train.max_steps=1000"])
    check(name + ": --resume of the same directory while it runs is refused",
          rc2 == 1 and "in use by another run" in err2, describe(rc2, out2, err2))
    first.proc.send_signal(signal.SIGTERM)
    rc, out, err = first.finish()
    steps = checkpoints(ckpt)
    check(name + ": the first run is undisturbed", rc == 0 and steps and not leftovers(ckpt),
          describe(rc, out, err))

    # kill -9 leaves the lock file; the kernel dropped the lock with the process.
    name = "stale-lock"
    ckpt = os.path.join(TMP, name, "ckpt")
    config = tiny_config(name, checkpoint={"dir": ckpt, "every_steps": 2})
    t = Trainer(config)
    started = t.wait_for("step 5 ")
    t.proc.kill()
    t.finish()
    steps = checkpoints(ckpt)
    check(name + ": kill -9 leaves checkpoints and a lock file",
          started and steps and os.path.exists(os.path.join(ckpt, ".lock")), str(steps))
    if steps:
        resumes(config, ckpt, steps[-1], name)


# ---------------------------------------------------------------------------------------------
# diverge


def diverge_setup(name):
    ckpt = os.path.join(TMP, name, "ckpt")
    config = tiny_config(name, checkpoint={"dir": ckpt, "every_steps": 2},
                         train={"max_steps": 4})
    rc, out, err = run([ARGS.train, "--config", config])
    ok = check(name + ": trains 4 steps", rc == 0 and checkpoints(ckpt) == [2, 4],
               describe(rc, out, err))
    return ok, ckpt, config


def test_diverge():
    # A checkpoint whose weights hold a NaN is refused on load, naming the file and the tensor.
    ok, ckpt, config = diverge_setup("nan-weights")
    if ok:
        poke_tensor(ckpt + "/ckpt-4", "model.safetensors", "encoder.layers.0.fc1.weight",
                    float("nan"))
        rc, out, err = run([ARGS.train, "--config", config, "--resume",
                            "--set", "train.max_steps=8"])
        check("nan-weights: --resume refuses the checkpoint",
              rc == 1 and "ckpt-4/model.safetensors" in err and "encoder.layers.0.fc1.weight" in err
              and "NaN" in err and checkpoints(ckpt) == [2, 4], describe(rc, out, err))
        shutil.rmtree(ckpt + "/ckpt-4")
        resumes(config, ckpt, 2, "nan-weights (earlier checkpoint)")

    # A negative second moment (finite, so it loads) turns fc1's weights into NaN at the first
    # step; every later step is non-finite. The run stops after train.max_bad_steps (default 20)
    # of them.
    ok, ckpt, config = diverge_setup("diverged-run")
    if ok:
        poke_tensor(ckpt + "/ckpt-4", "optimizer.safetensors",
                    "encoder.layers.0.fc1.weight.exp_avg_sq", -1e30)
        rc, out, err = run([ARGS.train, "--config", config, "--resume", "--set",
                            "train.max_steps=100", "--set", "checkpoint.every_steps=50"])
        lines = error_lines(err)
        check("diverged-run: stops with an error naming the steps and the last good checkpoint",
              rc == 1 and len(lines) == 1 and "diverged" in lines[0] and "steps 6 to 25" in lines[0]
              and ("last good checkpoint: %s/ckpt-4" % ckpt) in lines[0] and
              checkpoints(ckpt) == [2, 4] and not leftovers(ckpt), describe(rc, out, err))
        # Saving every step: the weights of step 5 are NaN and are not saved.
        rc, out, err = run([ARGS.train, "--config", config, "--resume", "--set",
                            "train.max_steps=100", "--set", "checkpoint.every_steps=1"])
        check("diverged-run: NaN weights are never saved",
              rc == 1 and "not saving" in err and "NaN" in err and
              ("last good checkpoint: %s/ckpt-4" % ckpt) in err and checkpoints(ckpt) == [2, 4]
              and not leftovers(ckpt), describe(rc, out, err))


# ---------------------------------------------------------------------------------------------
# json


def nested(depth):
    return "[" * depth + "]" * depth


def test_json():
    deep = os.path.join(TMP, "deep.json")
    with open(deep, "w") as f:
        f.write('{"model": {"d_model": ' + nested(200000) + "}}")
    rc, out, err = run([ARGS.train, "--config", deep])
    lines = error_lines(err)
    check("deep config: exit 2, one short message naming the file",
          rc == 2 and len(lines) == 1 and "deep.json" in lines[0] and "nest" in lines[0] and
          len(lines[0]) < 400, describe(rc, out, err))
    shallow = os.path.join(TMP, "shallow.json")
    with open(shallow, "w") as f:
        f.write('{"model": {"d_model": ' + nested(50) + "}}")
    rc, out, err = run([ARGS.train, "--config", shallow])
    lines = error_lines(err)
    check("nested config value: its message stays short",
          rc == 2 and len(lines) == 1 and "model.d_model" in lines[0] and len(lines[0]) < 400,
          describe(rc, out, err))
    long_value = os.path.join(TMP, "long.json")
    with open(long_value, "w") as f:
        f.write('{"model": {"norm": "' + "x" * 1000000 + '"}}')
    rc, out, err = run([ARGS.train, "--config", long_value])
    lines = error_lines(err)
    check("very long config value: exit 2, the value cut in the message",
          rc == 2 and len(lines) == 1 and "model.norm" in lines[0] and len(lines[0]) < 400,
          describe(rc, out, err))
    rc, out, err = run([ARGS.train, "--config", TINY_CONFIG, "--set", "model.norm=" + "y" * 100000])
    lines = error_lines(err)
    check("very long --set value: exit 2, the value cut in the message",
          rc == 2 and len(lines) == 1 and "model.norm" in lines[0] and len(lines[0]) < 400,
          describe(rc, out, err))

    # state.json with a deeply nested value: nmt-translate names the file, --resume skips the
    # checkpoint with a warning and continues from the one before.
    ckpt = os.path.join(TMP, "deep-state", "ckpt")
    config = tiny_config("deep-state", checkpoint={"dir": ckpt, "every_steps": 2},
                         train={"max_steps": 4})
    rc, out, err = run([ARGS.train, "--config", config])
    if check("deep-state: trains 4 steps", rc == 0 and checkpoints(ckpt) == [2, 4],
             describe(rc, out, err)):
        state_path = ckpt + "/ckpt-4/state.json"
        text = open(state_path).read()
        text = text.replace('"extra": {', '"extra": {"deep": ' + nested(200000) + ", ", 1)
        open(state_path, "w").write(text)
        rc, out, err = run([ARGS.translate, "--checkpoint", ckpt + "/ckpt-4", "--device", "cpu"])
        lines = error_lines(err)
        check("deep-state: nmt-translate exits 1 naming state.json",
              rc == 1 and len(lines) == 1 and "ckpt-4/state.json" in lines[0] and
              len(lines[0]) < 400, describe(rc, out, err))
        rc, out, err = run([ARGS.train, "--config", config, "--resume",
                            "--set", "train.max_steps=6"])
        check("deep-state: --resume skips it and continues from ckpt-2",
              rc == 0 and "skipping checkpoint " + ckpt + "/ckpt-4" in out and
              "resumed from " + ckpt + "/ckpt-2" in out, describe(rc, out, err))


# ---------------------------------------------------------------------------------------------
# vocab and prep: small nmt-prep directories from the bible corpus


def corpus_slice(name, first, count):
    base = os.path.join(ARGS.data, "bible-en-es")
    out = {}
    for split, side in (("train", "en"), ("train", "es"), ("dev", "en"), ("dev", "es")):
        lines = open(os.path.join(base, "%s.%s" % (split, side)), encoding="utf-8").readlines()
        start = first if split == "train" else 0
        n = count if split == "train" else 40
        path = os.path.join(TMP, "%s.%s.%s" % (name, split, side))
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(lines[start:start + n])
        out[split + "." + side] = path
    return out


def prep(text, out, vocab_size, extra=()):
    cmd = [ARGS.prep, "--quiet", "--train-src", text["train.en"], "--train-tgt", text["train.es"],
           "--dev-src", text["dev.en"], "--dev-tgt", text["dev.es"], "--out", out,
           "--vocab-size", str(vocab_size), "--threads", "1"] + list(extra)
    return run(cmd, timeout=300)


PREPPED = {}


def prepped(name, first, vocab_size):
    if name not in PREPPED:
        out = os.path.join(TMP, "prep-" + name)
        rc, o, e = prep(corpus_slice(name, first, 300), out, vocab_size)
        if rc != 0:
            raise RuntimeError("nmt-prep failed: " + describe(rc, o, e))
        PREPPED[name] = out
    return PREPPED[name]


def corpus_config(name, train, dev, **sections):
    cfg = {"data": {"train": train, "dev": dev, "max_src_len": 64, "max_tgt_len": 64,
                    "synthetic_train_pairs": 2000},
           "model": {"max_positions": 128}, "train": {"max_steps": 4, "batch_tokens": 1024},
           "eval": {"every_steps": 2 if dev else 0, "max_sentences": 8}}
    for section, values in sections.items():
        cfg.setdefault(section, {}).update(values)
    path = tiny_config(name, **cfg)
    return path


def shard_fingerprint(path):
    with open(path, "rb") as f:
        header = f.read(64)
    return struct.unpack("<Q", header[40:48])[0]


def test_vocab():
    a = prepped("a", 0, 200)
    b = prepped("b", 300, 200)  # other lines, same vocabulary size
    c = prepped("c", 0, 260)  # a larger vocabulary
    check("vocab: the two vocabularies differ at the same size",
          shard_fingerprint(a + "/train.src.shard") != shard_fingerprint(b + "/train.src.shard"))

    mixed = os.path.join(TMP, "prep-mixed")
    shutil.copytree(a, mixed)
    shutil.copy(b + "/spm.model", mixed + "/spm.model")
    rc, out, err = run([ARGS.train, "--config", corpus_config("mixed", mixed, "")])
    lines = error_lines(err)
    check("vocab: shards of another spm.model of the same size are refused, naming both files",
          rc == 1 and len(lines) == 1 and mixed + "/train.src.shard" in lines[0] and
          mixed + "/spm.model" in lines[0] and "step 1 " not in out, describe(rc, out, err))

    for dev, what in ((b, "the same size"), (c, "a larger size")):
        ckpt = os.path.join(TMP, "dev-" + os.path.basename(dev), "ckpt")
        config = corpus_config("dev-" + os.path.basename(dev), a, dev,
                               checkpoint={"dir": ckpt, "every_steps": 2})
        rc, out, err = run([ARGS.train, "--config", config])
        lines = error_lines(err)
        check("vocab: a dev set of another vocabulary of %s is refused at start-up" % what,
              rc == 1 and len(lines) == 1 and dev + "/dev.src.shard" in lines[0] and
              a + "/spm.model" in lines[0] and "step 1 " not in out, describe(rc, out, err))

    ckpt = os.path.join(TMP, "dev-same", "ckpt")
    config = corpus_config("dev-same", a, a, checkpoint={"dir": ckpt, "every_steps": 2})
    rc, out, err = run([ARGS.train, "--config", config])
    if check("vocab: matching shards and dev set train", rc == 0 and checkpoints(ckpt) == [2, 4],
             describe(rc, out, err)):
        # nmt-translate checks the weights it loads too (issue 15, item 6).
        poke_tensor(ckpt + "/ckpt-4", "model.safetensors", "encoder.layers.0.fc1.weight",
                    float("inf"))
        rc, out, err = run([ARGS.translate, "--checkpoint", ckpt + "/ckpt-4", "--device", "cpu"],
                           stdin_text="In the beginning\n")
        lines = error_lines(err)
        check("nan-weights: nmt-translate refuses a checkpoint with non-finite weights",
              rc == 1 and lines and "+inf" in lines[-1] and "ckpt-4/model.safetensors" in lines[-1]
              and not out, describe(rc, out, err))


def generation(out):
    """(spm.model bytes, report fingerprint, shard fingerprints) of a prepared directory."""
    report = json.load(open(out + "/report.json"))
    shards = {shard_fingerprint(os.path.join(out, n)) for n in os.listdir(out)
              if n.endswith(".shard")}
    return open(out + "/spm.model", "rb").read(), int(report["vocab"]["fingerprint"], 16), shards


def test_prep():
    text_a = corpus_slice("rerun-a", 0, 300)
    text_b = corpus_slice("rerun-b", 300, 300)
    out = os.path.join(TMP, "prep-rerun")
    rc, o, e = prep(text_a, out, 200)
    check("prep: first run", rc == 0, describe(rc, o, e))
    old_model, old_fp, _ = generation(out)
    # Leftovers of killed runs (pids that do not exist): beside the directory and, from older
    # versions, inside it.
    dead = "2147480000"
    host = socket.gethostname().replace("/", "_").replace("-", "_")
    os.makedirs(os.path.join(TMP, ".prep-rerun.nmt-prep-staging-%s-%s" % (host, dead)))
    os.makedirs(os.path.join(out, ".nmt-prep-staging-" + dead))
    rc, o, e = prep(text_b, out, 200)
    model, fp, shards = generation(out)
    check("prep: a rerun replaces the whole directory", rc == 0 and fp != old_fp and
          shards == {fp} and model != old_model, describe(rc, o, e))
    staging = [n for n in os.listdir(TMP) + os.listdir(out) if "nmt-prep-staging" in n]
    check("prep: staging directories of killed runs are removed", not staging, str(staging))

    # Killed at any moment of a rerun, the directory is the old one or the new one, never a mix.
    mixes = []
    for delay in (0.2, 0.5, 0.8, 1.1, 1.5):
        before_model, before_fp, _ = generation(out)
        cmd = [ARGS.prep, "--quiet", "--train-src", text_a["train.en"], "--train-tgt",
               text_a["train.es"], "--dev-src", text_a["dev.en"], "--dev-tgt", text_a["dev.es"],
               "--out", out, "--vocab-size", "200", "--threads", "1"]
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        p.kill()
        p.wait()
        model, fp, shards = generation(out)
        same = model == before_model and fp == before_fp
        if shards != {fp} or (model == before_model) != (fp == before_fp):
            mixes.append((delay, same))
    check("prep: a rerun killed at any moment leaves no mix of old and new files", not mixes,
          str(mixes))

    empty_src = os.path.join(TMP, "empty.en")
    empty_tgt = os.path.join(TMP, "empty.es")
    open(empty_src, "w").close()
    open(empty_tgt, "w").close()
    out = os.path.join(TMP, "prep-empty")
    rc, o, e = run([ARGS.prep, "--quiet", "--train-src", empty_src, "--train-tgt", empty_tgt,
                    "--out", out])
    lines = error_lines(e)
    check("prep: empty training files: exit 1 naming them, no output directory",
          rc == 1 and len(lines) == 1 and empty_src in lines[0] and "empty" in lines[0] and
          not os.path.exists(out), describe(rc, o, e))
    blank = os.path.join(TMP, "blank.en")
    with open(blank, "w") as f:
        f.write("\n  \n\n")
    blank_tgt = os.path.join(TMP, "blank.es")
    shutil.copy(blank, blank_tgt)
    rc, o, e = run([ARGS.prep, "--quiet", "--train-src", blank, "--train-tgt", blank_tgt,
                    "--out", out])
    lines = error_lines(e)
    check("prep: blank training lines: exit 1 naming the files, no output directory",
          rc == 1 and len(lines) == 1 and blank in lines[0] and not os.path.exists(out),
          describe(rc, o, e))


# ---------------------------------------------------------------------------------------------
# misc


def test_misc():
    rc, out, err = run([ARGS.train, "--config", TINY_CONFIG, "--set", "train.device=cuda",
                        "--set", "train.precision=bf16"], env={"CUDA_VISIBLE_DEVICES": ""})
    lines = error_lines(err)
    check("no GPU: train.device=cuda says so and how to run on the CPU",
          rc == 1 and len(lines) == 1 and "no GPU" in lines[0] and "train.device=cpu" in lines[0],
          describe(rc, out, err))

    ref = os.path.join(TMP, "ref.txt")
    with open(ref, "w") as f:
        f.write("the cat sat on the mat\n")
    with open("/dev/full", "w") as full:
        rc, out, err = run([ARGS.bleu, "--ref", ref, "--hyp", ref], stdout=full)
    check("nmt-bleu > /dev/full: exit 1 with a message", rc == 1 and "cannot write" in err,
          describe(rc, out, err))

    a = prepped("a", 0, 200)
    broken = os.path.join(TMP, "prep-novocab")
    shutil.copytree(a, broken)
    report = json.load(open(broken + "/report.json"))
    del report["vocab"]
    json.dump(report, open(broken + "/report.json", "w"))
    rc, out, err = run([ARGS.train, "--config", corpus_config("novocab", broken, "")])
    lines = error_lines(err)
    check("report.json without vocab: exit 1 naming the file",
          rc == 1 and len(lines) == 1 and broken + "/report.json" in lines[0] and
          "vocab" in lines[0] and "json.exception" not in lines[0], describe(rc, out, err))

    usage = [
        ("nmt-train without --config", [ARGS.train]),
        ("nmt-train unknown option", [ARGS.train, "--config", TINY_CONFIG, "--bogus"]),
        ("nmt-prep without arguments", [ARGS.prep]),
        ("nmt-translate bad --beam", [ARGS.translate, "--checkpoint", TMP, "--beam", "x"]),
        ("nmt-translate bad --device", [ARGS.translate, "--checkpoint", TMP, "--device", "tpu"]),
        ("nmt-bleu --width out of range", [ARGS.bleu, "--ref", ref, "--hyp", ref, "-w", "99"]),
        ("nmt-bleu unexpected argument", [ARGS.bleu, "--ref", ref, "--hyp", ref, "extra"]),
    ]
    for what, cmd in usage:
        rc, out, err = run(cmd)
        check("usage error exits 2: " + what, rc == 2 and err.strip(), describe(rc, out, err))
    for tool in (ARGS.train, ARGS.prep, ARGS.translate, ARGS.bleu):
        rc, out, err = run([tool, "--help"])
        check("--help exits 0 and documents the exit codes: " + os.path.basename(tool),
              rc == 0 and "Exit codes" in out, describe(rc, out, err))


# ---------------------------------------------------------------------------------------------


def gpu_present():
    try:
        p = subprocess.run(["nvidia-smi", "-L"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           text=True, timeout=30)
        return p.returncode == 0 and "GPU" in p.stdout
    except (OSError, subprocess.TimeoutExpired):
        return False


def main():
    global ARGS, TMP, TINY_CONFIG
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", required=True)
    parser.add_argument("--prep", required=True)
    parser.add_argument("--translate", required=True)
    parser.add_argument("--bleu", required=True)
    parser.add_argument("--data", default=os.environ.get("NMT_DATA_ROOT") or "../shared/data")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--group", action="append",
                        choices=["signals", "lock", "diverge", "json", "vocab", "prep", "misc"])
    ARGS = parser.parse_args()
    groups = ARGS.group or ["signals", "lock", "diverge", "json", "vocab", "prep", "misc"]
    if ARGS.device == "cuda" and not gpu_present():
        print("no GPU: skipped (run with label cuda on a machine with a GPU)")
        return SKIP
    if {"vocab", "prep", "misc"} & set(groups) and not os.path.isdir(
            os.path.join(ARGS.data, "bible-en-es")):
        print("no %s/bible-en-es: skipped" % ARGS.data)
        return SKIP
    TMP = tempfile.mkdtemp(prefix="nmt-faults-")
    TINY_CONFIG = tiny_config("tiny")
    try:
        for group in groups:
            start = time.time()
            print("== %s" % group)
            globals()["test_" + group]()
            print("   (%.1f s)" % (time.time() - start))
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    print("%d passed, %d failed" % (RESULTS["passed"], RESULTS["failed"]))
    return 1 if RESULTS["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
