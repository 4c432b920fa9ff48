#!/usr/bin/env python3
"""Checkpoints: an interrupted run resumed from its newest checkpoint gives a
loss trajectory bit-identical to an uninterrupted run; the files are
complete, checksummed (XXH3-64 in manifest.json) and atomic (no temp files
left, incomplete step directories ignored); damaged files and checkpoints of
another plan are rejected with a clear error.
"""
import json
import os
import shutil
import signal
import subprocess
import time

import numpy as np

import common
from common import mtp

FLAGS = ["--lr", "3e-3", "--warmup-steps", "2", "--lr-schedule", "cosine", "--grad-clip", "1.0",
         "--shuffle", "11", "--seed", "5"]


class Checkpoints(common.TempDirTest):
    def setUp(self):
        super().setUp()
        self.plan = self.write_tiny_plan(batch=2, seq=16, embd=32, heads=4, microbatches=2)
        self.ckpt = self.path("ckpt")

    def train(self, log, *extra):
        r = self.check_ok(common.run([self.plan, "--steps", 10, "--log-json", self.path(log)] + FLAGS
                                     + [str(e) for e in extra]))
        return common.read_log(self.path(log)), r

    def test_resume_is_bit_identical(self):
        full, _ = self.train("full.jsonl")
        part, _ = self.train("part.jsonl", "--checkpoint-dir", self.ckpt, "--checkpoint-every", 3,
                             "--stop-at-step", 7)
        self.assertEqual([p["step"] for p in part], list(range(7)))
        self.assertEqual(sorted(os.listdir(self.ckpt)), ["latest", "step-3", "step-6"])
        with open(os.path.join(self.ckpt, "latest")) as f:
            self.assertEqual(f.read(), "step-6\n")
        rest, r = self.train("rest.jsonl", "--checkpoint-dir", self.ckpt, "--checkpoint-every", 3,
                             "--resume")
        self.assertIn("resumed from", r.stdout)
        self.assertEqual([p["step"] for p in rest], [6, 7, 8, 9])
        for got in part + rest:
            want = full[got["step"]]
            for key in ("loss", "grad_norm", "lr"):
                self.assertEqual(got[key], want[key], f"step {got['step']}: {key} differs "
                                 f"({got[key]!r} vs {want[key]!r}): not bit-identical")
        self.assertEqual(sorted(os.listdir(self.ckpt)),
                         ["latest", "step-10", "step-3", "step-6", "step-9"])

        # The manifest's checksums describe the files.
        for step in ("step-3", "step-10"):
            with open(os.path.join(self.ckpt, step, "manifest.json")) as f:
                m = json.load(f)
            self.assertEqual(m["step"], int(step[5:]))
            self.assertEqual(m["world_size"], 1)
            (entry,) = m["files"]
            data = common.read_bytes(os.path.join(self.ckpt, step, entry["file"]))
            self.assertEqual(len(data), entry["bytes"])
            self.assertEqual(int(entry["xxh3_64"], 16), mtp.checksum64(data))
            tensors = mtp.read_safetensors(data)
            names = {n.split("/")[0] for n in tensors}
            self.assertEqual(names, {"param", "adam_m", "adam_v"})

        # Resuming a finished run has nothing to do.
        r = self.check_ok(common.run([self.plan, "--steps", 10, "--checkpoint-dir", self.ckpt,
                                      "--resume"] + FLAGS))
        self.assertIn("nothing to do", r.stdout)

    def test_resume_keeps_the_log_of_the_steps_before(self):
        # Resumed into the same --log-json: the steps before the checkpoint
        # stay, the one the interrupted run did past it (6) and a line the
        # interruption cut short go, and the resumed steps follow: every step
        # once, as an uninterrupted run logs them.
        full, _ = self.train("full.jsonl")
        part, _ = self.train("log.jsonl", "--checkpoint-dir", self.ckpt, "--checkpoint-every", 3,
                             "--stop-at-step", 7)
        self.assertEqual([p["step"] for p in part], list(range(7)))
        with open(self.path("log.jsonl"), "a") as f:
            f.write('{"step": 7, "loss": 4.')
        log, _ = self.train("log.jsonl", "--checkpoint-dir", self.ckpt, "--resume")
        self.assertEqual([p["step"] for p in log], list(range(10)))
        self.assertEqual([p["loss"] for p in log], [p["loss"] for p in full])
        self.assertFalse(os.path.exists(self.path("log.jsonl.tmp")))
        # A log that cannot be rewritten (its directory is gone) is an error naming it.
        self.check_fails(common.run([self.plan, "--steps", 10, "--checkpoint-dir", self.ckpt,
                                     "--resume", "--log-json", self.path("gone/log.jsonl")]),
                         "--log-json file: cannot create")
        # A run that does not resume starts its log afresh.
        log, _ = self.train("log.jsonl")
        self.assertEqual([p["step"] for p in log], list(range(10)))

    def test_incomplete_and_damaged_checkpoints(self):
        self.train("a.jsonl", "--checkpoint-dir", self.ckpt, "--checkpoint-every", 2, "--stop-at-step", 4)
        self.assertFalse([n for n in os.listdir(self.ckpt) if n.startswith(".")], "temp files left")
        # A half-written step directory (no manifest) and a stale temp directory are ignored.
        os.makedirs(os.path.join(self.ckpt, "step-8"))
        os.makedirs(os.path.join(self.ckpt, ".step-9.tmp"))
        _, r = self.train("b.jsonl", "--checkpoint-dir", self.ckpt, "--resume", "--stop-at-step", 5)
        self.assertIn("at step 4", r.stdout)
        shutil.rmtree(os.path.join(self.ckpt, "step-8"))
        shutil.rmtree(os.path.join(self.ckpt, ".step-9.tmp"))

        # One flipped byte: the checksum catches it.
        f = os.path.join(self.ckpt, "step-4", "rank-0.safetensors")
        data = bytearray(common.read_bytes(f))
        data[len(data) // 2] ^= 1
        with open(f, "wb") as out:
            out.write(bytes(data))
        self.check_fails(common.run([self.plan, "--steps", 10, "--checkpoint-dir", self.ckpt, "--resume"]),
                         "is damaged: checksum")

        # An edited manifest.json: a field of the wrong type is named, not reported as a
        # bare JSON type error.
        mpath = os.path.join(self.ckpt, "step-4", "manifest.json")
        good = json.load(open(mpath))
        for edit, text in ((lambda m: m["plan"].update(checksum=12), "field 'plan.checksum' must be a string, got 12"),
                           (lambda m: m.update(step="4"), "field 'step' must be a non-negative integer, got \"4\""),
                           (lambda m: m["files"].insert(0, 7), "field 'files[0]' must be an object, got 7"),
                           (lambda m: m["files"][0].update(bytes=-1),
                            "field 'files[0].bytes' must be a non-negative integer, got -1"),
                           # A checkpoint of an older format (version 1 had FNV-1a checksums).
                           (lambda m: m.update(version=1),
                            "is a version 1 PipeMesh checkpoint, this pipemesh-run reads version 2")):
            m = json.loads(json.dumps(good))
            edit(m)
            with open(mpath, "w") as out:
                json.dump(m, out)
            self.check_fails(common.run([self.plan, "--steps", 10, "--checkpoint-dir", self.ckpt,
                                         "--resume"]), text)

    def test_resume_across_epochs_of_a_reshuffled_corpus(self):
        # 200 tokens: 12 windows of 16, 4 sequences a step, a new order every 3 steps. The
        # run stopped at 7 and resumed reads the epochs of an uninterrupted one.
        data = self.path("small.bin")
        common.write_shard(data, np.arange(200) % 97)
        full, _ = self.train("full.jsonl", "--data", data)
        part, _ = self.train("part.jsonl", "--data", data, "--checkpoint-dir", self.ckpt,
                             "--checkpoint-every", 3, "--stop-at-step", 7)
        rest, r = self.train("rest.jsonl", "--data", data, "--checkpoint-dir", self.ckpt,
                             "--checkpoint-every", 3, "--resume")
        self.assertNotIn("warning", r.stdout + r.stderr)
        for got in part + rest:
            self.assertEqual(got["loss"], full[got["step"]]["loss"], f"step {got['step']}")

        # A checkpoint written before epochs were reshuffled (its run record lacks
        # shuffle_each_epoch) resumes, with a warning that the order changed.
        mpath = os.path.join(self.ckpt, "step-9", "manifest.json")
        shutil.rmtree(os.path.join(self.ckpt, "step-10"))
        with open(os.path.join(self.ckpt, "latest"), "w") as f:
            f.write("step-9\n")
        with open(mpath) as f:
            m = json.load(f)
        self.assertIs(m["run"]["shuffle_each_epoch"], True)
        del m["run"]["shuffle_each_epoch"]
        with open(mpath, "w") as out:
            json.dump(m, out)
        _, r = self.train("old.jsonl", "--data", data, "--checkpoint-dir", self.ckpt, "--resume")
        self.assertIn("read every epoch in the order of the first", r.stdout)

    def test_keep_checkpoints(self):
        # The newest two stay; the run stopped at 7 resumes from step-6 and ends with 9, 10.
        full, _ = self.train("full.jsonl")
        self.train("part.jsonl", "--checkpoint-dir", self.ckpt, "--checkpoint-every", 2,
                   "--keep-checkpoints", 2, "--stop-at-step", 7)
        self.assertEqual(sorted(os.listdir(self.ckpt)), ["latest", "step-4", "step-6"])
        rest, r = self.train("rest.jsonl", "--checkpoint-dir", self.ckpt, "--checkpoint-every", 3,
                             "--keep-checkpoints", 2, "--resume")
        self.assertIn("older removed, --keep-checkpoints 2", r.stdout)
        self.assertEqual(sorted(os.listdir(self.ckpt)), ["latest", "step-10", "step-9"])
        self.assertEqual([(g["step"], g["loss"]) for g in rest], [(g["step"], g["loss"]) for g in full[6:]])
        self.check_fails(common.run([self.plan, "--steps", 2, "--keep-checkpoints", 1]),
                         "--keep-checkpoints needs --checkpoint-dir")

    def test_max_minutes_and_sigusr1_stop_with_a_checkpoint(self):
        # --max-minutes 0: stop after the first step, checkpointed; the resumed run ends as the
        # uninterrupted one, bit for bit.
        full, _ = self.train("full.jsonl")
        part, r = self.train("part.jsonl", "--checkpoint-dir", self.ckpt, "--max-minutes", 0)
        self.assertIn("stopping after step 1: --max-minutes reached", r.stdout)
        self.assertEqual(sorted(os.listdir(self.ckpt)), ["latest", "step-1"])
        rest, _ = self.train("part.jsonl", "--checkpoint-dir", self.ckpt, "--resume")
        self.assertEqual([(g["step"], g["loss"], g["grad_norm"]) for g in rest],
                         [(g["step"], g["loss"], g["grad_norm"]) for g in full])
        # SIGUSR1 (a batch system's warning), to one process and, through mpirun, to two.
        for world in (None, 2):
            with self.subTest(world=world):
                ckpt, log = self.path(f"usr1-{world}"), self.path(f"usr1-{world}.jsonl")
                cmd = [common.PIPEMESH_RUN, self.plan, "--steps", "1000000", "--log-json", log,
                       "--checkpoint-dir", ckpt] + [str(f) for f in FLAGS]
                if world:
                    cmd = ["mpirun", "-np", str(world), "--oversubscribe"] + cmd
                    manifest, weights = mtp.build_mlp(dp=2, microbatches=1)
                    plan = self.path("dp2.plan")
                    mtp.write_plan(plan, manifest, weights)
                    cmd[cmd.index(self.plan)] = plan
                env = dict(os.environ, **common.MPI_ENV)
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, env=env)
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline and not (os.path.exists(log) and
                                                           len(common.read_log(log)) >= 3):
                    time.sleep(0.05)
                proc.send_signal(signal.SIGUSR1)
                out, err = proc.communicate(timeout=120)
                self.assertEqual(proc.returncode, 0, out + err)
                done = len(common.read_log(log))
                self.assertGreaterEqual(done, 3)
                self.assertEqual(out.count("SIGUSR1 received"), 1, out)
                self.assertIn(f"stopping after step {done}: SIGUSR1 received", out)
                with open(os.path.join(ckpt, "latest")) as f:
                    self.assertEqual(f.read(), f"step-{done}\n")

    def test_resharding_refusals(self):
        # The checkpoint of one plan, read by another of the same model: a rank file that
        # lacks a tensor its index lists, or (no index) leaves elements no file holds, and a
        # manifest without the model
        # (as older pipemesh-runs wrote it) cannot be checked for resharding.
        self.train("a.jsonl", "--checkpoint-dir", self.ckpt, "--stop-at-step", 2, "--checkpoint-every", 2)
        other = self.write_tiny_plan("other.plan", batch=2, seq=16, embd=32, heads=4,
                                     microbatches=2, seed=9)
        step = os.path.join(self.ckpt, "step-2")
        mpath = os.path.join(step, "manifest.json")
        with open(mpath) as f:
            good = json.load(f)
        rank0 = os.path.join(step, "rank-0.safetensors")
        tensors = mtp.read_safetensors(common.read_bytes(rank0))
        del tensors["adam_v/wte"]
        data = mtp.safetensors_bytes(tensors)
        with open(rank0, "wb") as f:
            f.write(data)
        m = json.loads(json.dumps(good))
        m["files"][0].update(bytes=len(data), xxh3_64="0x%016x" % mtp.checksum64(data))
        with open(mpath, "w") as f:
            json.dump(m, f)
        # index.json still lists the tensor; without the index (an older manifest) the
        # files' headers show that no file holds those values.
        self.check_fails(common.run([other, "--steps", 3, "--checkpoint-dir", self.ckpt, "--resume"]),
                         "rank-0.safetensors' does not hold 8192 F32 values as tensor 'adam_v/wte'")
        del m["index"]
        with open(mpath, "w") as f:
            json.dump(m, f)
        self.check_fails(common.run([other, "--steps", 3, "--checkpoint-dir", self.ckpt, "--resume"]),
                         "holds no adam_v value for elements 0..8192 of parameter 'wte'")
        del m["model"]
        with open(mpath, "w") as f:
            json.dump(m, f)
        self.check_fails(common.run([other, "--steps", 3, "--checkpoint-dir", self.ckpt, "--resume"]),
                         "was written for another plan", "records no model to reshard it by")

    def test_other_plan_and_missing_checkpoint(self):
        self.check_fails(common.run([self.plan, "--steps", 3, "--checkpoint-dir", self.ckpt, "--resume"]),
                         "no complete checkpoint")
        self.train("a.jsonl", "--checkpoint-dir", self.ckpt, "--stop-at-step", 2, "--checkpoint-every", 2)
        # Another plan of another model, or of this one reading other data.
        wider = self.write_tiny_plan("wider.plan", batch=2, seq=16, embd=48, heads=4, microbatches=2)
        self.check_fails(common.run([wider, "--steps", 3, "--checkpoint-dir", self.ckpt, "--resume"]),
                         "holds parameter", "with shape 256x32, this plan", "has 256x48")
        fewer = self.write_tiny_plan("fewer.plan", batch=2, seq=16, embd=32, heads=4, microbatches=1)
        self.check_fails(common.run([fewer, "--steps", 3, "--checkpoint-dir", self.ckpt, "--resume"]),
                         "was written with global_batch 4, this plan", "has 2")
        shorter = self.write_tiny_plan("shorter.plan", batch=2, seq=8, embd=32, heads=4, microbatches=2)
        self.check_fails(common.run([shorter, "--steps", 3, "--checkpoint-dir", self.ckpt, "--resume"]),
                         "was written with seq 16")
        # Another plan of the same model (here: other initial weights) resumes it, resharded
        # (test_compiled_parallel resumes pp/dp/zero checkpoints in other layouts).
        other = self.write_tiny_plan("other.plan", batch=2, seq=16, embd=32, heads=4,
                                     microbatches=2, seed=9)
        r = self.check_ok(common.run([other, "--steps", 3, "--checkpoint-dir", self.ckpt, "--resume"]))
        self.assertIn("at step 2 (another plan's checkpoint, pp=1 dp=1 zero=0 (world size 1): resharded)",
                      r.stdout)


if __name__ == "__main__":
    common.main()
