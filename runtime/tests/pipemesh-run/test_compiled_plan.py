#!/usr/bin/env python3
"""End to end with the compiler: pipemesh-opt compiles the committed PyTorch
GPT-2 export, pipemesh-run trains it on the default corpus and exports the
trained weights, and the ONNX model itself (evaluated by models/onnx_eval.py,
NumPy) agrees with the runtime: the source model's loss on step 0's batch is
the runtime's step-0 loss, and the exported model's loss on step 3's batch is
the runtime's step-3 loss (computed with the weights after 3 updates).
Skipped when PIPEMESH_OPT is not set (a runtime-only build).
"""
import os
import subprocess
import sys
import unittest

import numpy as np
import onnx

import common
import reference

sys.path.insert(0, os.path.join(common.REPO, "models"))
import onnx_eval  # noqa: E402

PIPEMESH_OPT = os.environ.get("PIPEMESH_OPT")
MODEL = os.path.join(common.REPO, "models", "fixtures", "torch_gpt2_tiny_op17_dyn_fold.onnx")
B, T = 2, 32


def onnx_loss(path, x, y):
    out = onnx_eval.Evaluator(onnx.load(path)).run({"input_ids": x})
    logits = (out[0] if isinstance(out, (list, tuple)) else next(iter(out.values()))).astype(np.float64)
    logits -= logits.max(-1, keepdims=True)
    lp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return float(-np.take_along_axis(lp, y[..., None], -1).mean())


@unittest.skipUnless(PIPEMESH_OPT, "PIPEMESH_OPT not set")
class CompiledPlan(common.TempDirTest):
    def test_train_and_export(self):
        plan = self.path("gpt.plan")
        r = subprocess.run([PIPEMESH_OPT, MODEL, f"--pipemesh-compile=batch={B} seq={T} microbatches=2",
                            "-o", plan], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = self.path("trained.onnx")
        self.check_ok(common.run([plan, "--steps", 4, "--log-json", self.path("log.jsonl"),
                                  "--export-onnx", self.path("after3.onnx"), "--stop-at-step", 3]))
        self.check_ok(common.run([plan, "--steps", 4, "--log-json", self.path("log4.jsonl"),
                                  "--export-onnx", out]))
        log = common.read_log(self.path("log4.jsonl"))
        corpus = self.path("corpus.bin")
        self.check_ok(common.run(["--write-default-corpus", corpus]))
        sampler = reference.Sampler(common.read_shard(corpus), T, B, 1, 2)

        def step_loss(model, s):
            return sum(onnx_loss(model, *sampler.microbatch(s, j, 0)) for j in range(2)) / 2

        want0 = step_loss(MODEL, 0)
        want3 = step_loss(self.path("after3.onnx"), 3)
        print(f"\n  step 0: runtime {log[0]['loss']:.7f}, ONNX model {want0:.7f}; "
              f"step 3: runtime {log[3]['loss']:.7f}, exported model {want3:.7f}")
        self.assertLess(abs(log[0]["loss"] - want0) / want0, 1e-5)
        self.assertLess(abs(log[3]["loss"] - want3) / want3, 1e-5)
        self.assertLess(log[3]["loss"], log[0]["loss"])
        onnx.checker.check_model(onnx.load(out))


if __name__ == "__main__":
    common.main()
