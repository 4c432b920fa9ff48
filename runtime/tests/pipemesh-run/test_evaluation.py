#!/usr/bin/env python3
"""Validation loss (--val-data, --eval-interval, --eval-iters): the plan's own
program run without what only the update needs (runtime/include/pipemesh/
runtime/Evaluation.h).

- PyTorch oracle: the validation loss after 10 steps equals the mean loss of
  the PyTorch-trained model (reference.train) on the same validation batches.
- Consistency: when the training data is a single global batch, the loss an
  evaluation reports after k steps is, bit for bit, the training loss of step
  k + 1 (same parameters, same batch, same forward), on one rank and on
  pp=2 dp=2 plans of every ZeRO level.
- Evaluating changes nothing: the training log is bit-identical with and
  without evaluations (ZeRO-1's gathers in flight across steps, ZeRO-2's
  gradient shards, recomputation); a run stopped and resumed writes the same
  log, evaluations included.
- Errors: options without --val-data, a missing or out-of-vocabulary file, a
  plan whose forward reads what a backward action writes (refused, naming the
  instruction, before any step).
Skipped when PIPEMESH_OPT is not set (a runtime-only build).
"""
import os
import unittest

import numpy as np
import torch

import common
import reference
from common import mtp
from generated_gpt import PIPEMESH_OPT, GeneratedGptTest


@unittest.skipUnless(PIPEMESH_OPT, "PIPEMESH_OPT not set")
class Evaluation(GeneratedGptTest):
    VOCAB = 100  # the validation tokens: below every vocabulary here

    def shard(self, name, tokens):
        path = self.path(name)
        common.write_shard(path, tokens)
        return path

    def val_shard(self, n=3000, seed=11):
        return self.shard("val.bin", np.random.default_rng(seed).integers(0, self.VOCAB, n))

    def steps_and_evals(self, log):
        return ([x for x in log if "loss" in x], [x for x in log if "val_loss" in x])

    def test_matches_pytorch(self):
        val = self.val_shard()
        plan = self.compile("one.plan", f"microbatches={self.M}")
        _, log = self.train(plan, "one", extra=["--val-data", val, "--eval-iters", "3"])
        steps, evals = self.steps_and_evals(log)
        self.assertEqual(len(steps), self.STEPS)
        self.assertEqual([(e["step"], e["val_batches"]) for e in evals], [(self.STEPS - 1, 3)])
        self.assertEqual(evals[0]["val_tokens"], 3 * self.B * self.M * self.T)

        _, params = self.torch_run("gpt2")
        p = {k: torch.tensor(v) for k, v in params.items()}
        sampler = reference.Sampler(common.read_shard(val), self.T, self.B, 1, self.M)
        with torch.no_grad():
            want = np.mean([reference.gpt2_loss(p, torch.from_numpy(x), torch.from_numpy(y),
                                                self.HEADS)[0].item()
                            for i in range(3) for x, y in [sampler.microbatch(i, 0, 0)]])
        got = evals[0]["val_loss"]
        print(f"\n  validation loss after {self.STEPS} steps: pipemesh-run {got:.7f}, "
              f"PyTorch {want:.7f}")
        self.assertLess(abs(got - want) / want, 1e-4)

    def test_is_the_next_steps_training_loss(self):
        # One window per sequence of the global batch: every step trains on the same
        # batch, and evaluation batch 0 is that batch.
        for name, options, world, sequences in [
                ("one", "microbatches=2", 1, 2 * self.B),
                ("zero1", "pp=2 dp=2 microbatches=1 zero=1", 4, 2 * self.B),
                ("zero2-bfs", "pp=2 dp=2 microbatches=2 zero=2 schedule=bfs", 4, 4 * self.B),
                ("zero3-recompute", "pp=2 dp=2 microbatches=1 zero=3 recompute=full", 4, 2 * self.B)]:
            with self.subTest(name):
                data = self.shard(name + ".bin", np.random.default_rng(3).integers(
                    0, self.VOCAB, sequences * self.T + 1))
                plan = self.compile(name + ".plan", options)
                _, log = self.train(plan, name, world, ["--data", data, "--val-data", data,
                                                        "--eval-interval", "1"])
                steps, evals = self.steps_and_evals(log)
                self.assertEqual([e["step"] for e in evals], list(range(self.STEPS)))
                self.assertEqual([e["val_batches"] for e in evals], [1] * self.STEPS)
                for e, next_step in zip(evals, steps[1:]):
                    self.assertEqual(e["val_loss"], next_step["loss"], f"after step {e['step'] + 1}")
                self.assertLess(evals[-1]["val_loss"], steps[0]["loss"])

    def test_leaves_training_unchanged(self):
        val = self.val_shard()
        for name, options in [("zero1-bfs", "pp=2 dp=2 microbatches=2 zero=1 schedule=bfs"),
                              ("zero2-recompute", "pp=2 dp=2 microbatches=2 zero=2 recompute=full")]:
            with self.subTest(name):
                plan = self.compile(name + ".plan", options)
                _, plain = self.train(plan, name + "-plain", 4)
                _, log = self.train(plan, name + "-eval", 4,
                                    ["--val-data", val, "--eval-interval", "3", "--eval-iters", "2"])
                steps, evals = self.steps_and_evals(log)
                self.assertEqual([e["step"] for e in evals], [2, 5, 8, 9])
                self.assertEqual([(s["loss"], s["grad_norm"]) for s in steps],
                                 [(s["loss"], s["grad_norm"]) for s in plain])

    def test_resume_writes_the_same_log(self):
        val = self.val_shard()
        plan = self.compile("pp2.plan", "pp=2 dp=2 microbatches=1 zero=1")
        flags = ["--val-data", val, "--eval-interval", "2"]
        _, whole = self.train(plan, "whole", 4, flags)
        ckpt = self.path("ckpt")
        log = self.path("resumed.jsonl")
        base = [plan, "--steps", self.STEPS, "--lr", self.LR, "--log-json", log,
                "--checkpoint-dir", ckpt, "--checkpoint-every", 3] + flags
        self.check_ok(common.run(base + ["--stop-at-step", 5], np_=4))
        self.check_ok(common.run(base + ["--resume"], np_=4))
        strip = lambda entries: [{k: v for k, v in e.items() if k not in ("ms", "tokens_per_s", "tflops_per_rank", "ranks")}
                                 for e in entries]
        self.assertEqual(strip(common.read_log(log)), strip(whole))

    def test_errors(self):
        plan = self.compile("one.plan", f"microbatches={self.M}")
        val = self.val_shard()
        self.check_fails(common.run([plan, "--steps", 1, "--eval-interval", 2]),
                         "--eval-interval needs --val-data")
        self.check_fails(common.run([plan, "--steps", 1, "--eval-iters", 2]),
                         "--eval-iters needs --val-data")
        self.check_fails(common.run([plan, "--steps", 1, "--val-data", self.path("none.bin")]),
                         "none.bin")
        big = self.shard("big.bin", np.full(200, 5000))
        self.check_fails(common.run([plan, "--steps", 1, "--val-data", big]), "big.bin", "5000")
        self.check_fails(common.run([plan, "--steps", 1, "--val-data", val, "--eval-iters", 0]),
                         "--eval-iters must be at least 1")
        # A device backend refuses evaluation (a build without one: the backend is unknown),
        # before any device is looked for.
        r = common.run([plan, "--steps", 1, "--val-data", val, "--backend", "cuda"])
        self.assertNotEqual(r.returncode, 0)
        self.assertTrue("evaluation runs on the cpu backend only" in r.stderr
                        or "backend 'cuda' is not available" in r.stderr, r.stderr)

    def test_refuses_a_plan_whose_forward_reads_a_backward_value(self):
        # Relabel the first forward layer_norm as a backward action's: an evaluation
        # would skip it while the next forward matmul reads its result.
        plan = self.compile("one.plan", f"microbatches={self.M}")
        manifest, weights = mtp.read_plan(plan)
        program = manifest["ranks"][0]["program"]
        k = next(i for i, x in enumerate(program) if x["op"] == "layer_norm")
        program[k]["action"] = program[k]["action"].replace("F", "B")
        bad = self.path("bad.plan")
        mtp.write_plan(bad, manifest, weights)
        self.check_ok(common.run([bad, "--steps", 1]))  # training does not care
        self.check_fails(common.run([bad, "--steps", 1, "--val-data", self.val_shard()]),
                         "evaluation (--val-data) cannot run it", f"left by instruction {k} (layer_norm")


if __name__ == "__main__":
    common.main()
