#!/usr/bin/env python3
"""Training a hand-made plan with pipemesh-run matches PyTorch step by step:
same initial weights, same data (canonical sampling), torch.optim.AdamW with
the same settings (decay on rank >= 2 parameters), clip_grad_norm_, and the
documented warmup/cosine schedule. Losses agree within 1e-5 relative, the
learning rates exactly, gradient norms and final weights closely.
"""
import os

import numpy as np

import common
from common import mtp
import reference


class TrainReference(common.TempDirTest):
    def default_corpus(self):
        path = self.path("corpus.bin")
        self.check_ok(common.run(["--write-default-corpus", path]))
        return common.read_shard(path)

    def compare(self, model, builder_kw, flags, ref_kw, steps, data=None, shuffle=None, heads=4):
        b, weights = mtp.MODELS[model](**builder_kw)
        plan = self.path(f"{model}.plan")
        mtp.write_plan(plan, b.manifest(), b.weights)
        args = [plan, "--steps", steps, "--log-json", self.path("log.jsonl"),
                "--checkpoint-dir", self.path("ckpt")] + flags
        if data is not None:
            shard = self.path("data.bin")
            common.write_shard(shard, data)
            args += ["--data", shard]
            tokens = data
        else:
            tokens = self.default_corpus()
        if shuffle is not None:
            args += ["--shuffle", shuffle]
        r = self.check_ok(common.run(args))
        got = common.read_log(self.path("log.jsonl"))
        self.assertEqual([g["step"] for g in got], list(range(steps)))

        sampler = reference.Sampler(tokens, b.seq, b.batch, 1, b.microbatches, shuffle)
        want, final = reference.train(model, weights, sampler, steps, heads, **ref_kw)
        worst = 0.0
        for s, (g, w) in enumerate(zip(got, want)):
            rel = abs(g["loss"] - w["loss"]) / abs(w["loss"])
            worst = max(worst, rel)
            self.assertLess(rel, 1e-5, f"step {s}: loss {g['loss']} vs PyTorch {w['loss']}")
            self.assertAlmostEqual(g["lr"], w["lr"], delta=1e-12 * max(1.0, w["lr"]))
            self.assertLess(abs(g["grad_norm"] - w["grad_norm"]) / w["grad_norm"], 1e-4,
                            f"step {s}: grad_norm {g['grad_norm']} vs {w['grad_norm']}")
        # Final weights, from the checkpoint written after the last step.
        ck = mtp.read_safetensors(common.read_bytes(
            os.path.join(self.path("ckpt"), f"step-{steps}", "rank-0.safetensors")))
        wmax = 0.0
        for name, value in final.items():
            diff = np.max(np.abs(ck["param/" + name] - value))
            wmax = max(wmax, float(diff))
            self.assertLess(diff, 1e-4, f"final weight {name} differs by {diff}")
        losses = [g["loss"] for g in got]
        print(f"\n  {model} {flags}: losses {losses[0]:.6f} -> {losses[-1]:.6f}, "
              f"worst relative loss difference {worst:.2e}, max weight difference {wmax:.2e}")
        return got

    def test_tiny_gpt_constant_lr(self):
        got = self.compare("tiny-gpt", dict(batch=2, seq=16, microbatches=1), [], {}, 10)
        self.assertLess(got[-1]["loss"], got[0]["loss"])

    def test_tiny_gpt_microbatches_warmup_cosine_clip(self):
        flags = ["--lr", "3e-3", "--warmup-steps", "3", "--lr-schedule", "cosine", "--min-lr", "1e-4",
                 "--grad-clip", "1.0", "--weight-decay", "0.1", "--beta2", "0.95"]
        ref = dict(lr=3e-3, warmup=3, schedule="cosine", min_lr=1e-4, grad_clip=1.0,
                   weight_decay=0.1, beta2=0.95)
        got = self.compare("tiny-gpt", dict(batch=2, seq=16, microbatches=4), flags, ref, 12, shuffle=7)
        self.assertTrue(any(g["grad_norm"] > 1.0 for g in got), "clipping never engaged")

    def test_linear_and_wsd_schedules(self):
        # The rate each step used (the log's lr) is the documented formula's (compare
        # checks it), and the losses follow PyTorch trained with it.
        for schedule, extra_flags, extra_ref in [("linear", [], {}),
                                                 ("wsd", ["--decay-steps", "4"], dict(decay_steps=4))]:
            with self.subTest(schedule):
                flags = ["--lr", "3e-3", "--warmup-steps", "2", "--lr-schedule", schedule,
                         "--min-lr", "2e-4"] + extra_flags
                ref = dict(lr=3e-3, warmup=2, schedule=schedule, min_lr=2e-4, **extra_ref)
                self.compare("tiny-gpt", dict(batch=2, seq=16, microbatches=2), flags, ref, 10)
        self.assertEqual([round(reference.learning_rate(s, 1.0, 10, 2, "wsd", 0.0, 4), 9) for s in range(10)],
                         [0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.75, 0.5, 0.25])

    def test_schedule_errors(self):
        b, _ = mtp.MODELS["tiny-gpt"](batch=2, seq=16, microbatches=1)
        plan = self.path("tiny.plan")
        mtp.write_plan(plan, b.manifest(), b.weights)
        self.check_fails(common.run([plan, "--steps", 5, "--lr-schedule", "wsd"]),
                         "--lr-schedule wsd needs --decay-steps")
        self.check_fails(common.run([plan, "--steps", 5, "--lr-schedule", "wsd", "--decay-steps", 6]),
                         "got 6")
        self.check_fails(common.run([plan, "--steps", 5, "--decay-steps", 2]),
                         "--decay-steps needs --lr-schedule wsd")
        self.check_fails(common.run([plan, "--steps", 5, "--lr-schedule", "step"]),
                         "constant, cosine, linear or wsd")

    def test_zoo_ops(self):
        rng = np.random.default_rng(3)
        data = rng.integers(0, 64, size=4000)
        flags = ["--lr", "1e-2", "--grad-clip", "0.5", "--eps", "1e-6"]
        ref = dict(lr=1e-2, grad_clip=0.5, eps=1e-6)
        self.compare("zoo", dict(batch=2, seq=8, microbatches=2), flags, ref, 10, data=data, heads=2)

    def test_profile_leaves_out_the_first_step(self):
        b, _ = mtp.MODELS["tiny-gpt"](batch=2, seq=16, microbatches=1)
        plan = self.path("tiny.plan")
        mtp.write_plan(plan, b.manifest(), b.weights)

        def profile(*flags):
            out = self.check_ok(common.run([plan, "--profile"] + list(flags))).stdout
            head = [l for l in out.splitlines() if l.startswith("pipemesh-run: time per op")]
            self.assertEqual(len(head), 1, out)
            ops = {}
            for line in out.splitlines()[out.splitlines().index(head[0]) + 1:]:
                parts = line.split()  # "  matmul   20.98 ms   44.4%"
                if len(parts) != 4 or parts[2] != "ms":
                    break
                ops[parts[0]] = float(parts[1])
            total = float(head[0].split(";")[-1].split()[0])
            self.assertIn("matmul", ops)
            self.assertAlmostEqual(sum(ops.values()), total, delta=0.05 * len(ops))
            return head[0], ops

        head, _ = profile("--steps", "3")
        self.assertIn("(steps 2-3, the first left out", head)
        head, _ = profile("--steps", "1")
        self.assertIn("(steps 1-1;", head)
        # Stopped after the first step: nothing after it to time, so it stays in.
        head, _ = profile("--steps", "3", "--stop-at-step", "1")
        self.assertIn("(steps 1-1;", head)
        # Resumed at its last step: no step to time, said so.
        ckpt = self.path("ckpt")
        self.check_ok(common.run([plan, "--steps", "2", "--checkpoint-dir", ckpt,
                                  "--checkpoint-every", "2"]))
        out = self.check_ok(common.run([plan, "--steps", "2", "--checkpoint-dir", ckpt,
                                        "--resume", "--profile"])).stdout
        self.assertIn("--profile: no step ran", out)
        self.assertNotIn("time per op", out)


if __name__ == "__main__":
    common.main()
