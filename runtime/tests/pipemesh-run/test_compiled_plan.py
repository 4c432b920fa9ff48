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
    def train_and_export(self, model):
        """Four steps of `model`; the losses of steps 0 and 3 against the ONNX model and
        the model exported after step 3, evaluated by onnx_eval."""
        stem = os.path.basename(model)[:-len(".onnx")]
        at = lambda name: self.path(f"{stem}-{name}")  # noqa: E731 (files per model)
        plan = at("gpt.plan")
        r = subprocess.run([PIPEMESH_OPT, model, f"--pipemesh-compile=batch={B} seq={T} microbatches=2",
                            "-o", plan], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = at("trained.onnx")
        self.check_ok(common.run([plan, "--steps", 4, "--log-json", at("log.jsonl"),
                                  "--export-onnx", at("after3.onnx"), "--stop-at-step", 3]))
        self.check_ok(common.run([plan, "--steps", 4, "--log-json", at("log4.jsonl"),
                                  "--export-onnx", out]))
        log = common.read_log(at("log4.jsonl"))
        corpus = at("corpus.bin")
        self.check_ok(common.run(["--write-default-corpus", corpus]))
        sampler = reference.Sampler(common.read_shard(corpus), T, B, 1, 2)

        def step_loss(model, s):
            return sum(onnx_loss(model, *sampler.microbatch(s, j, 0)) for j in range(2)) / 2

        want0 = step_loss(model, 0)
        want3 = step_loss(at("after3.onnx"), 3)
        print(f"\n  step 0: runtime {log[0]['loss']:.7f}, ONNX model {want0:.7f}; "
              f"step 3: runtime {log[3]['loss']:.7f}, exported model {want3:.7f}")
        self.assertLess(abs(log[0]["loss"] - want0) / want0, 1e-5)
        self.assertLess(abs(log[3]["loss"] - want3) / want3, 1e-5)
        self.assertLess(log[3]["loss"], log[0]["loss"])
        if max(o.version for o in onnx.load(out).opset_import if o.domain in ("", "ai.onnx")) <= 17:
            onnx.checker.check_model(onnx.load(out))  # Debian's onnx 1.12 knows up to 17

    def test_train_and_export(self):
        self.train_and_export(MODEL)

    def test_pytorch2_exports_train_and_export(self):
        # transformers' Falcon (heads gathered from a fused projection) and the
        # exporter-optimized Llama (weights renamed val_N): exported back by name.
        for name in ("hf_falcon_dynamo.onnx", "hf_llama_dynamo_optimized.onnx"):
            with self.subTest(name):
                self.train_and_export(os.path.join(common.REPO, "models", "fixtures", name))


    def test_model_flops_throughput_and_mfu(self):
        # The step log's TFLOP/s per rank is the plan's model FLOPs per step (checked
        # against GPT-2's closed form in test/Plan/model-flops.test) over the step's
        # time and the ranks; MFU is that over --peak-tflops, only when it is given.
        for name, opts, world in [("one", "", 1), ("pp2", " pp=2", 2)]:
            with self.subTest(name):
                plan = self.path(name + ".plan")
                r = subprocess.run([PIPEMESH_OPT, MODEL, f"--pipemesh-compile=batch={B} seq={T} "
                                    f"microbatches=2{opts}", "-o", plan], capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, r.stderr)
                flops = common.mtp.read_plan(plan)[0]["model"]["flops_per_step"]
                self.assertGreater(flops, 0)
                for peak in [None, 0.05]:
                    log = self.path(f"{name}-{peak}.jsonl")
                    extra = ["--peak-tflops", peak] if peak else []
                    r = self.check_ok(common.run([plan, "--steps", 2, "--log-json", log, *extra],
                                                 np_=world if world > 1 else None))
                    for rec in common.read_log(log):
                        per_rank = flops / (rec["ms"] / 1e3) / world / 1e12
                        self.assertAlmostEqual(rec["tflops_per_rank"] / per_rank, 1.0, delta=1e-6)
                        if peak:
                            self.assertAlmostEqual(rec["mfu"], rec["tflops_per_rank"] / peak, delta=1e-12)
                        else:
                            self.assertNotIn("mfu", rec)
                    self.assertIn(" GFLOP/s/rank", r.stdout)
                    self.assertEqual("| MFU " in r.stdout, bool(peak), r.stdout)
        self.check_fails(common.run([plan, "--steps", 1, "--peak-tflops", 0]),
                         "--peak-tflops must be positive")

    def test_filled_shapes_only_plan(self):
        """bench/fill_plan_weights.py (how bench/gpu.sh gets GPT-2 plans onto a GPU machine
        without the compiler) turns the shapes-only plan of a gen_gpt2.py model into the
        plan compiled from its full ONNX file: the same weights, the same training."""
        gen = os.path.join(common.REPO, "models", "gen_gpt2.py")
        fill = os.path.join(common.REPO, "bench", "fill_plan_weights.py")
        opts = "--pipemesh-compile=batch=2 seq=16 microbatches=2"
        for kind, extra in (("full", "--external-data"), ("shapes", "--shapes-only")):
            onnx_path = self.path(f"{kind}.onnx")
            self.assertEqual(subprocess.run([sys.executable, gen, "--preset", "tiny", "--seed", "3",
                                             extra, "-o", onnx_path], capture_output=True).returncode, 0)
            r = subprocess.run([PIPEMESH_OPT, onnx_path, opts + (" shapes-only=true" if kind == "shapes" else ""),
                                "-o", self.path(f"{kind}.plan")], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
        # A shapes-only plan cannot be run; the filler refuses a plan that has its weights.
        r = common.run([self.path("shapes.plan"), "--steps", 1])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("compiled with shapes-only=true", r.stderr)
        r = subprocess.run([sys.executable, fill, self.path("full.plan"), "-o", self.path("x.plan")],
                           capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("not a shapes-only plan", r.stderr)
        # A model gen_gpt2.py did not write (the torch export: its head is another tensor),
        # and a missing plan: errors that name them.
        r = subprocess.run([PIPEMESH_OPT, MODEL, opts + " shapes-only=true", "-o", self.path("torch.plan")],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        for plan, text in ((self.path("torch.plan"), "which gen_gpt2.py does not make"),
                           (self.path("missing.plan"), "no such plan")):
            r = subprocess.run([sys.executable, fill, plan, "-o", self.path("x.plan")],
                               capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(text, r.stderr)
        r = subprocess.run([sys.executable, fill, self.path("shapes.plan"), "--seed", "3",
                            "-o", self.path("filled.plan")], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        (m1, w1), (m2, w2) = common.mtp.read_plan(self.path("full.plan")), common.mtp.read_plan(self.path("filled.plan"))
        self.assertEqual(sorted(w1), sorted(w2))
        for k in w1:
            self.assertEqual(w1[k].shape, w2[k].shape, k)
            np.testing.assert_array_equal(w1[k], w2[k], err_msg=k)
        m1["model"].pop("source"), m2["model"].pop("source")
        self.assertEqual(m1, m2)
        logs = []
        for kind in ("full", "filled"):
            self.check_ok(common.run([self.path(f"{kind}.plan"), "--steps", 3,
                                      "--log-json", self.path(f"{kind}.jsonl")]))
            logs.append([r["loss"] for r in common.read_log(self.path(f"{kind}.jsonl"))])
        self.assertEqual(logs[0], logs[1])


if __name__ == "__main__":
    common.main()
