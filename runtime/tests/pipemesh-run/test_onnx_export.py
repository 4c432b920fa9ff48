#!/usr/bin/env python3
"""--export-onnx writes the trained weights into a copy of the plan's source
model: initializers overwritten in place, parameters an exporter deduplicated
behind Identity split into their own initializers (Identity nodes removed),
the transposed copy of the tied embedding rewritten transposed, external
data inlined; the values equal the final checkpoint's bit for bit.
"""
import os
import resource
import signal
import subprocess

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import common
from common import mtp


def narrow_bits(values, kind):
    """float32 values rounded to float16 (numpy) or bfloat16 (PyTorch), as uint16 bits:
    the oracles the runtime's own rounding is checked against."""
    if kind == "float16":
        return np.asarray(values, dtype=np.float32).astype(np.float16).view(np.uint16)
    import torch
    t = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).to(torch.bfloat16)
    return t.view(torch.int16).numpy().view(np.uint16)


def tensor(values, name, kind):
    if kind in ("float32", "float64"):
        return numpy_helper.from_array(values.astype(kind), name)
    return helper.make_tensor(name, {"float16": TensorProto.FLOAT16,
                                     "bfloat16": TensorProto.BFLOAT16}[kind], values.shape,
                              narrow_bits(values, kind).tobytes(), raw=True)


def source_model(weights, path, external=False, kind="float32"):
    """A small valid ONNX graph holding the tiny GPT's initial weights the way
    exporters store them (dedup behind Identity, a folded transposed head), in
    float32 or, as a half-precision export has them, in float16 or bfloat16."""
    inits = [tensor(v, k, kind) for k, v in weights.items() if k not in mtp.TINY_GPT_SOURCES]
    inits.append(tensor(np.ascontiguousarray(weights["wte"].T), "head.weight", kind))
    nodes = [helper.make_node("Identity", [src], [name], name=f"dedup_{name}")
             for name, src in mtp.TINY_GPT_SOURCES.items()]
    nodes += [helper.make_node("Gather", ["wte", "input_ids"], ["e"]),
              helper.make_node("Add", ["e", "lnf.bias"], ["e2"]),
              helper.make_node("MatMul", ["e2", "head.weight"], ["logits"])]
    V, C = weights["wte"].shape
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "t"])],
        [helper.make_tensor_value_info("logits", inits[0].data_type, ["b", "t", V])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    if external:
        onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=os.path.basename(path) + ".data", size_threshold=0)
    else:
        onnx.save(model, path)


class OnnxExport(common.TempDirTest):
    def export(self, external, env=None):
        b, w = mtp.build_tiny_gpt(batch=2, seq=16, embd=32, heads=4, source="tiny_gpt.onnx")
        plan = self.path("tiny.plan")
        mtp.write_plan(plan, b.manifest(), b.weights)
        source_model(w, self.path("tiny_gpt.onnx"), external)
        out = self.path("trained.onnx")
        r = self.check_ok(common.run([plan, "--steps", 3, "--export-onnx", out,
                                      "--checkpoint-dir", self.path("ckpt")], env=env))
        self.assertIn("exported 16 trained parameters", r.stdout)
        self.assertIn("3 deduplicated ones split, 1 transposed copies", r.stdout)
        model = onnx.load(out)
        onnx.checker.check_model(model)
        got = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        ck = mtp.read_safetensors(common.read_bytes(self.path("ckpt/step-3/rank-0.safetensors")))
        for name in w:
            np.testing.assert_array_equal(got[name], ck["param/" + name], err_msg=name)
            self.assertFalse(np.array_equal(got[name], w[name]) and w[name].ndim == 2,
                             f"{name} was not trained")
        np.testing.assert_array_equal(got["head.weight"], ck["param/wte"].T)
        self.assertEqual([n.op_type for n in model.graph.node], ["Gather", "Add", "MatMul"])
        # The deduplicated parameters trained apart.
        self.assertFalse(np.array_equal(got["lnf.bias"], got["ln1.bias"]))

    def test_inline_source(self):
        self.export(external=False)

    def test_half_bfloat16_and_double_sources_keep_their_type(self):
        # A model exported in half precision computes in it: its initializers are
        # written back in their own type, rounded to nearest even (numpy's and
        # PyTorch's casts are the oracles), the split copies too; float64 holds
        # the float32 values exactly.
        for kind, onnx_type in (("float16", TensorProto.FLOAT16),
                                ("bfloat16", TensorProto.BFLOAT16),
                                ("float64", TensorProto.DOUBLE)):
            with self.subTest(kind):
                b, w = mtp.build_tiny_gpt(batch=2, seq=16, embd=32, heads=4,
                                          source=f"{kind}.onnx")
                plan = self.path(f"{kind}.plan")
                mtp.write_plan(plan, b.manifest(), b.weights)
                source_model(w, self.path(f"{kind}.onnx"), kind=kind)
                out, ckpt = self.path(f"{kind}-trained.onnx"), self.path(f"{kind}-ckpt")
                r = self.check_ok(common.run([plan, "--steps", 2, "--export-onnx", out,
                                              "--checkpoint-dir", ckpt]))
                self.assertIn("3 deduplicated ones split, 1 transposed copies", r.stdout)
                model = onnx.load(out)
                onnx.checker.check_model(model)
                ck = mtp.read_safetensors(
                    common.read_bytes(os.path.join(ckpt, "step-2/rank-0.safetensors")))
                got = {t.name: t for t in model.graph.initializer}
                expected = {name: ck["param/" + name] for name in w}
                expected["head.weight"] = ck["param/wte"].T
                for name, values in expected.items():
                    t = got[name]
                    self.assertEqual(t.data_type, onnx_type, name)
                    if kind == "float64":  # the float32 values, exactly
                        np.testing.assert_array_equal(numpy_helper.to_array(t),
                                                      values.astype(np.float64), err_msg=name)
                        continue
                    bits = np.frombuffer(t.raw_data, dtype="<u2").reshape(values.shape)
                    np.testing.assert_array_equal(bits, narrow_bits(values, kind), err_msg=name)

    def test_external_data_source(self):
        self.export(external=True)

    def test_external_data_output(self):
        # The > 2 GiB path, with the threshold lowered: initializers go to OUT.onnx.data.
        self.export(external=False, env={"PIPEMESH_ONNX_INLINE_LIMIT": "1000"})
        self.assertTrue(os.path.getsize(self.path("trained.onnx.data")) > 80000)
        self.assertLess(os.path.getsize(self.path("trained.onnx")), 20000)

    def test_integer_initializer_refused(self):
        # A parameter whose initializer in the source is not a float tensor (the
        # source was edited since compiling): named, nothing written.
        b, w = mtp.build_tiny_gpt(batch=2, seq=16, embd=32, heads=4, source="int.onnx")
        plan = self.path("int.plan")
        mtp.write_plan(plan, b.manifest(), b.weights)
        src = self.path("int.onnx")
        source_model(w, src)
        model = onnx.load(src)
        for t in model.graph.initializer:
            if t.name == "wte":
                t.CopyFrom(numpy_helper.from_array(w["wte"].astype(np.int32), "wte"))
        onnx.save(model, src)
        out = self.path("int-trained.onnx")
        self.check_fails(common.run([plan, "--steps", 1, "--export-onnx", out]),
                         "--export-onnx: initializer 'wte' is not a float tensor")
        self.assertFalse(os.path.exists(out))

    def test_missing_source(self):
        # Found missing before the first step, not after the last (a run does
        # not train for hours, then fail to export); on 2 ranks rank 0 alone says so.
        plan = self.write_tiny_plan(batch=2, seq=16, embd=32, heads=4, source="nowhere.onnx")
        r = self.check_fails(common.run([plan, "--steps", 1, "--export-onnx", self.path("o.onnx")]),
                             "source model 'nowhere.onnx' does not exist")
        self.assertNotIn("step 1/1", r.stdout)
        r = self.check_fails(common.run([plan, "--steps", 1, "--export-onnx", self.path("o.onnx"),
                                         "--onnx-source", self.path("gone.onnx")]),
                             "--onnx-source '" + self.path("gone.onnx") + "' is not a file")
        self.assertNotIn("step 1/1", r.stdout)
        manifest, weights = mtp.build_mlp(dp=2, microbatches=1)
        manifest["model"]["source"] = "nowhere.onnx"
        dp2 = self.path("dp2.plan")
        mtp.write_plan(dp2, manifest, weights)
        r = self.check_fails(common.run([dp2, "--steps", 1, "--export-onnx", self.path("o2.onnx")],
                                        np_=2, timeout=120), "does not exist")
        self.assertEqual(r.stderr.count("does not exist"), 1, r.stderr)
        self.assertNotIn("step 1/1", r.stdout)

    def test_source_moved_with_its_plan(self):
        # pipemesh-opt records the model's absolute path; a plan moved together with
        # its model finds the model by its file name beside the plan.
        b, w = mtp.build_tiny_gpt(batch=2, seq=16, embd=32, heads=4,
                                  source="/nonexistent/dir/tiny_gpt.onnx")
        plan = self.path("tiny.plan")
        mtp.write_plan(plan, b.manifest(), b.weights)
        source_model(w, self.path("tiny_gpt.onnx"))
        r = self.check_ok(common.run([plan, "--steps", 1, "--export-onnx", self.path("t.onnx")]))
        self.assertIn("(from " + self.path("tiny_gpt.onnx") + ":", r.stdout)

    def test_export_over_its_source_and_a_failed_one(self):
        # Written beside its path and renamed over it: the source model itself
        # can be the output, and a failed export leaves what was there as it
        # was, with no temp file behind.
        b, w = mtp.build_tiny_gpt(batch=2, seq=16, embd=32, heads=4, source="tiny_gpt.onnx")
        plan = self.path("tiny.plan")
        mtp.write_plan(plan, b.manifest(), b.weights)
        src = self.path("tiny_gpt.onnx")
        source_model(w, src, external=False)
        self.check_ok(common.run([plan, "--steps", 2, "--export-onnx", src]))
        got = {t.name: numpy_helper.to_array(t) for t in onnx.load(src).graph.initializer}
        self.assertFalse(np.array_equal(got["wte"], w["wte"]), "wte was not trained")
        # A write that fails halfway (a full disk; here a 20 MB file size
        # limit, over what MPI's start-up writes, under which a 25 MB model
        # cannot be written): the model that was there stays whole.
        b, w = mtp.build_tiny_gpt(batch=2, seq=16, vocab=16384, embd=384, heads=4,
                                  source="big_gpt.onnx")
        plan = self.path("big.plan")
        mtp.write_plan(plan, b.manifest(), b.weights)
        src = self.path("big_gpt.onnx")
        source_model(w, src, external=False)
        before = common.read_bytes(src)
        def limited():
            resource.setrlimit(resource.RLIMIT_FSIZE, (20 << 20, 20 << 20))
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not death
        r = subprocess.run([common.PIPEMESH_RUN, plan, "--steps", "1", "--export-onnx", src],
                           capture_output=True, text=True, timeout=300, preexec_fn=limited,
                           env=dict(os.environ, **common.MPI_ENV))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--export-onnx: cannot write", r.stderr)
        self.assertEqual(common.read_bytes(src), before)
        self.assertGreater(len(before), 20 << 20)
        os.mkdir(self.path("taken"))
        self.check_fails(common.run([plan, "--steps", 1, "--export-onnx", self.path("taken")]),
                         "--export-onnx: cannot write")
        self.assertTrue(os.path.isdir(self.path("taken")))
        self.assertEqual([f for f in os.listdir(self.dir) if f.endswith(".tmp")], [])


if __name__ == "__main__":
    common.main()
