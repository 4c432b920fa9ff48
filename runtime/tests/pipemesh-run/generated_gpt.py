"""A test case around a small GPT-2 that models/gen_gpt2.py writes: compile it with
pipemesh-opt, train it with pipemesh-run, train the same model with the PyTorch
reference (reference.gpt2_loss). Shared by the bf16 storage tests."""
import os
import subprocess
import sys

import numpy as np
import onnx
import onnx.numpy_helper
import torch

import common
import reference

PIPEMESH_OPT = os.environ.get("PIPEMESH_OPT")


class GeneratedGptTest(common.TempDirTest):
    B, T, M, STEPS, HEADS, LR = 4, 32, 1, 10, 4, 3e-3

    def setUp(self):
        super().setUp()
        self.model = self.path("gpt.onnx")
        gen = os.path.join(common.REPO, "models", "gen_gpt2.py")
        subprocess.run([sys.executable, gen, "--preset", "tiny", "--seed", "5", "--ctx",
                        str(self.T), "-o", self.model], check=True, capture_output=True)

    def compile(self, name, options):
        plan = self.path(name)
        r = subprocess.run([PIPEMESH_OPT, self.model,
                            f"--pipemesh-compile=batch={self.B} seq={self.T} {options}", "-o",
                            plan], capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, f"pipemesh-opt {options} failed:\n{r.stderr}")
        return plan

    def train(self, plan, name, world=1, extra=()):
        """Trains STEPS steps; returns the run and its --log-json entries."""
        log = self.path(name + ".jsonl")
        r = common.run([plan, "--steps", self.STEPS, "--lr", self.LR, "--log-json", log, *extra],
                       np_=world if world > 1 else None, timeout=300)
        self.check_ok(r)
        return r, common.read_log(log)

    def torch_run(self, model, dtype=torch.float32, dp=1, grad_reduce="f32", node_size=0):
        """reference.train of MODELS[model] on the same data (dp replicas of B
        sequences): (log, final parameters)."""
        weights = {i.name: onnx.numpy_helper.to_array(i).astype(np.float32)
                   for i in onnx.load(self.model).graph.initializer
                   if i.name.startswith("transformer.")}
        corpus = self.path("corpus.bin")
        if not os.path.exists(corpus):
            self.check_ok(common.run(["--write-default-corpus", corpus]))
        sampler = reference.Sampler(common.read_shard(corpus), self.T, self.B, dp, self.M)
        return reference.train(model, weights, sampler, self.STEPS, self.HEADS, lr=self.LR,
                               dtype=dtype, grad_reduce=grad_reduce, node_size=node_size)

    def assert_cuda_refuses(self, options, world=1):
        """The CUDA backend refuses a plan compiled with `options` (a bf16 storage option
        its kernels do not run), naming the option; built without CUDA, the backend is
        unknown. Either way before any device is looked for."""
        r = common.run([self.compile("cuda.plan", options), "--steps", 1, "--backend", "cuda"],
                       np_=world if world > 1 else None)
        self.assertNotEqual(r.returncode, 0)
        text = r.stdout + r.stderr
        named = options.split()[-1]
        self.assertTrue(named in text or "backend 'cuda' is not available in this build" in text,
                        text)
