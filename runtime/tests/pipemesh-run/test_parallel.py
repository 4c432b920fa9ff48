#!/usr/bin/env python3
"""Multi-rank plans (docs/parallel-plan.md) train the same losses as one rank.

Hand-made plans of a residual-MLP language model with a tied embedding
(make_test_plan.build_mlp): a 2-stage pipeline (1f1b and gpipe), a 4-stage
pipeline, a dp=2 replica pair at each ZeRO level (0: all-reduce; 1: reduce-
scatter, sharded AdamW, all-gather; 2: per-micro-batch reduce-scatter into
gradient shards; 3: parameters all-gathered before use) and pp=2 x dp=2 on 4
ranks. Each runs under mpirun and must give the losses and gradient norms of
the single-rank plan with the same global batch (dp * microbatches
micro-batches) within 1e-5 relative, and the same final weights (reassembled
from the per-rank checkpoint shards). Also: the per-rank compute / comm /
idle split in --log-json, and sharded checkpoints (a manifest listing every
rank's file with its checksum; bit-identical resume; another configuration
resumes resharded).
"""
import copy
import json
import os
import shutil

import numpy as np

import common
from common import mtp

STEPS = 5
FLAGS = ["--lr", "1e-2", "--grad-clip", "1.0", "--weight-decay", "0.1", "--shuffle", "5",
         "--comm-timeout", "60"]


def final_params(ckpt_step_dir):
    """Full parameters from every rank file of a checkpoint step directory:
    whole tensors ("param/<name>") and shards ("param/<name>@<first element>")."""
    with open(os.path.join(ckpt_step_dir, "manifest.json")) as f:
        manifest = json.load(f)
    whole, shards = {}, {}
    for entry in manifest["files"]:
        data = common.read_bytes(os.path.join(ckpt_step_dir, entry["file"]))
        assert len(data) == entry["bytes"] and int(entry["xxh3_64"], 16) == mtp.checksum64(data)
        for name, value in mtp.read_safetensors(data).items():
            kind, _, pname = name.partition("/")
            if kind != "param":
                continue
            if "@" in pname:
                pname, first = pname.split("@")
                shards.setdefault(pname, {})[int(first)] = value
            else:
                whole.setdefault(pname, []).append(value)
    out = {}
    for name, copies in whole.items():
        for c in copies[1:]:  # replicas and the tied copy stay identical
            np.testing.assert_array_equal(c, copies[0], err_msg=f"copies of {name} differ")
        out[name] = copies[0]
    for name, parts in shards.items():
        flat = np.concatenate([parts[k] for k in sorted(parts)])
        if name in out:
            n = out[name].size
            np.testing.assert_array_equal(flat[:n], out[name].reshape(-1),
                                          err_msg=f"shards of {name} differ from its full copy")
        else:
            out[name] = flat
    return out


def elide_replicas(manifest):
    """The manifest as pipemesh-opt writes it for dp > 1 (docs/plan-format.md): dp
    rank 0's entry of each pipeline rank, replicas_elided set, and norm_dp0_only
    where replica 0 counts a gradient in the global norm that the others do not."""
    m = copy.deepcopy(manifest)
    dp = m["parallel"]["dp"]
    by_rank = {r["rank"]: r for r in m["ranks"]}
    kept = []
    for r in m["ranks"]:
        if r["rank"] % dp:
            continue
        other = by_rank[r["rank"] + 1]
        for ins, ins1 in zip(r["program"], other["program"]):
            for e, e1 in zip(ins.get("params", []), ins1.get("params", [])):
                if e.get("norm_weight", 1.0) != 0.0 and e1.get("norm_weight", 1.0) == 0.0:
                    del e["norm_weight"]
                    e["norm_dp0_only"] = True
        kept.append(r)
    m["ranks"] = kept
    m["parallel"]["replicas_elided"] = True
    return m


class Parallel(common.TempDirTest):
    refs = {}

    def reference(self, layers, microbatches):
        """The single-rank run with the same global batch (cached per class)."""
        key = (layers, microbatches)
        if key not in Parallel.refs:
            manifest, weights = mtp.build_mlp(layers=layers, microbatches=microbatches)
            plan = self.path(f"ref-{layers}-{microbatches}.plan")
            mtp.write_plan(plan, manifest, weights)
            log, ckpt = self.path("ref.jsonl"), self.path("ref-ckpt")
            self.check_ok(common.run([plan, "--steps", STEPS, "--log-json", log,
                                      "--checkpoint-dir", ckpt] + FLAGS))
            Parallel.refs[key] = (common.read_log(log), final_params(os.path.join(ckpt, f"step-{STEPS}")))
        return Parallel.refs[key]

    def check_equivalent(self, pp=1, dp=1, zero=0, microbatches=2, schedule="1f1b", layers=None,
                         elided=False):
        layers = layers or max(2, pp)
        manifest, weights = mtp.build_mlp(pp=pp, dp=dp, zero=zero, microbatches=microbatches,
                                          schedule=schedule, layers=layers)
        if elided:
            manifest = elide_replicas(manifest)
        name = f"pp{pp}-dp{dp}-zero{zero}-{schedule}-m{microbatches}{'-elided' if elided else ''}"
        plan = self.path(name + ".plan")
        mtp.write_plan(plan, manifest, weights)
        log, ckpt = self.path(name + ".jsonl"), self.path(name + "-ckpt")
        r = self.check_ok(common.run([plan, "--steps", STEPS, "--log-json", log, "--checkpoint-dir", ckpt]
                                     + FLAGS, np_=pp * dp, timeout=120))
        self.assertEqual(r.stdout.count("step "), STEPS, "rank 0 alone prints the progress lines")
        got = common.read_log(log)
        want, want_params = self.reference(layers, microbatches * dp)
        self.assertEqual([g["step"] for g in got], list(range(STEPS)))
        worst = 0.0
        for g, w in zip(got, want):
            rel = abs(g["loss"] - w["loss"]) / abs(w["loss"])
            worst = max(worst, rel)
            self.assertLess(rel, 1e-5, f"{name} step {g['step']}: loss {g['loss']} vs one rank {w['loss']}")
            self.assertLess(abs(g["grad_norm"] - w["grad_norm"]) / w["grad_norm"], 1e-5,
                            f"{name} step {g['step']}: grad_norm {g['grad_norm']} vs {w['grad_norm']}")
            self.assertEqual(g["lr"], w["lr"])
            # Per-rank split, gathered to rank 0: a list indexed by rank.
            self.assertEqual([x["rank"] for x in g["ranks"]], list(range(pp * dp)))
            for x in g["ranks"]:
                self.assertGreater(x["compute_ms"], 0)
                self.assertGreater(x["comm_ms"], 0, f"{name}: rank {x['rank']} reports no communication")
                self.assertGreaterEqual(x["idle_ms"], 0)
        params = final_params(os.path.join(ckpt, f"step-{STEPS}"))
        self.assertEqual(sorted(params), sorted(want_params))
        wmax = max(float(np.max(np.abs(params[k].reshape(-1)[: want_params[k].size]
                                       - want_params[k].reshape(-1)))) for k in params)
        self.assertLess(wmax, 1e-5, f"{name}: final weights differ by {wmax}")
        print(f"\n  {name}: losses {got[0]['loss']:.6f} -> {got[-1]['loss']:.6f}, worst relative "
              f"loss difference {worst:.1e}, weights {wmax:.1e}; last step {got[-1]['ms']:.2f} ms, "
              "per rank compute/comm/idle ms " + ", ".join(
                  f"{x['compute_ms']:.2f}/{x['comm_ms']:.2f}/{x['idle_ms']:.2f}" for x in got[-1]["ranks"]))
        return got

    def test_pp2_1f1b(self):
        self.check_equivalent(pp=2, microbatches=4, schedule="1f1b")

    def test_pp2_gpipe(self):
        self.check_equivalent(pp=2, microbatches=3, schedule="gpipe")

    def test_pp4_1f1b(self):
        self.check_equivalent(pp=4, microbatches=4, schedule="1f1b")

    def test_dp2_each_zero_level(self):
        for zero in range(4):
            with self.subTest(zero=zero):
                self.check_equivalent(dp=2, zero=zero, microbatches=2)

    def test_pp2_dp2_zero1(self):
        self.check_equivalent(pp=2, dp=2, zero=1, microbatches=2, schedule="1f1b")

    def test_pp2_dp2_zero3_gpipe(self):
        self.check_equivalent(pp=2, dp=2, zero=3, microbatches=2, schedule="gpipe")

    def test_elided_replicas(self):
        # The plan pipemesh-opt writes for dp > 1: dp rank 0's program of each
        # pipeline rank; the runtime derives the other replicas (peers, tied
        # group, shard offsets, the global norm's weights) and trains the same.
        for zero in (0, 1, 3):
            with self.subTest(zero=zero):
                self.check_equivalent(pp=2, dp=2, zero=zero, microbatches=2, elided=True)


class ShardedCheckpoints(common.TempDirTest):
    def plan(self, name, **kw):
        manifest, weights = mtp.build_mlp(**kw)
        path = self.path(name)
        mtp.write_plan(path, manifest, weights)
        return path

    def train(self, plan, world, log, *extra):
        r = self.check_ok(common.run([plan, "--steps", 6, "--log-json", self.path(log)] + FLAGS
                                     + [str(e) for e in extra], np_=world, timeout=120))
        return common.read_log(self.path(log)), r

    def test_resume_pp2_dp2_zero1(self):
        plan = self.plan("p.plan", pp=2, dp=2, zero=1, microbatches=2)
        ckpt = self.path("ckpt")
        full, _ = self.train(plan, 4, "full.jsonl")
        part, _ = self.train(plan, 4, "part.jsonl", "--checkpoint-dir", ckpt, "--checkpoint-every", 2,
                             "--stop-at-step", 4)
        self.assertEqual(sorted(os.listdir(ckpt)), ["latest", "step-2", "step-4"])
        step4 = os.path.join(ckpt, "step-4")
        with open(os.path.join(step4, "manifest.json")) as f:
            m = json.load(f)
        self.assertEqual(m["world_size"], 4)
        self.assertEqual({k: m["parallel"][k] for k in ("pp", "dp", "zero")}, {"pp": 2, "dp": 2, "zero": 1})
        self.assertEqual([e["rank"] for e in m["files"]], [0, 1, 2, 3])
        self.assertEqual(sorted(os.listdir(step4)), ["index.json", "manifest.json"] + [f"rank-{r}.safetensors" for r in range(4)])
        for e in m["files"]:
            data = common.read_bytes(os.path.join(step4, e["file"]))
            self.assertEqual((len(data), int(e["xxh3_64"], 16)), (e["bytes"], mtp.checksum64(data)))
            names = set(mtp.read_safetensors(data))
            # zero=1: moments are shards; rank r = p*dp + d holds shard d.
            d = e["rank"] % 2
            self.assertTrue(any(n.startswith("adam_m/") and "@" in n for n in names), names)
            self.assertTrue(all("@" in n for n in names if n.startswith("adam_")))
            if d == 0:
                self.assertIn("adam_m/wte@0", names)
        rest, r = self.train(plan, 4, "rest.jsonl", "--checkpoint-dir", ckpt, "--resume")
        self.assertIn("resumed from", r.stdout)
        self.assertEqual([p["step"] for p in rest], [4, 5])
        for got in part + rest:
            want = full[got["step"]]
            for key in ("loss", "grad_norm", "lr"):
                self.assertEqual(got[key], want[key], f"step {got['step']}: {key} differs after resume")

    def test_other_configuration_resumes_resharded(self):
        # ZeRO-1 shards on two ranks, resumed as ZeRO-2 on two and whole on one: the
        # losses continue within 1e-5 of the uninterrupted run. Another global batch
        # (another data order) is refused, once, by rank 0.
        ckpt = self.path("ckpt")
        z1 = self.plan("z1.plan", dp=2, zero=1, microbatches=2)
        full, _ = self.train(z1, 2, "full.jsonl")
        self.train(z1, 2, "a.jsonl", "--checkpoint-dir", ckpt, "--stop-at-step", 2, "--checkpoint-every", 2)
        for name, plan, world in [("z2", self.plan("z2.plan", dp=2, zero=2, microbatches=2), 2),
                                  ("one", self.plan("one.plan", microbatches=4), 1)]:
            with self.subTest(name):
                here = self.path("ckpt-" + name)
                shutil.copytree(ckpt, here)
                rest, r = self.train(plan, world, name + ".jsonl", "--checkpoint-dir", here,
                                     "--resume")
                self.assertIn("(another plan's checkpoint, pp=1 dp=2 zero=1 (world size 2): resharded)",
                              r.stdout)
                self.assertEqual([p["step"] for p in rest], [2, 3, 4, 5])
                for got in rest:
                    want = full[got["step"]]
                    self.assertLess(abs(got["loss"] - want["loss"]) / want["loss"], 1e-5)
                    self.assertLess(abs(got["grad_norm"] - want["grad_norm"]) / want["grad_norm"], 1e-5)
        m1 = self.plan("m1.plan", dp=2, zero=2, microbatches=1)
        r = self.check_fails(common.run([m1, "--steps", 6, "--checkpoint-dir", ckpt, "--resume"], np_=2,
                                        timeout=120),
                             "was written with global_batch 8, this plan", "has 4",
                             "would change the data each step reads")
        self.assertEqual(r.stderr.count("would change the data"), 1, "rank 0 alone reports")

    def test_resharded_resume_reads_only_the_files_it_needs(self):
        # zero=0 on two ranks: both files hold every value. index.json (what each file
        # holds) lets the one-rank resume read the first file alone, so it resumes with the
        # second file gone; a checkpoint without the index (an older pipemesh-run's) reads
        # every file's header and names the missing one. A damaged index is named.
        ckpt = self.path("ckpt")
        z0 = self.plan("z0.plan", dp=2, zero=0, microbatches=2)
        one = self.plan("one.plan", microbatches=4)
        full, _ = self.train(z0, 2, "full.jsonl")
        self.train(z0, 2, "a.jsonl", "--checkpoint-dir", ckpt, "--stop-at-step", 2, "--checkpoint-every", 2)
        with open(os.path.join(ckpt, "step-2", "manifest.json")) as f:
            manifest = json.load(f)
        with open(os.path.join(ckpt, "step-2", manifest["index"]["file"])) as f:
            index = json.load(f)
        self.assertEqual(len(index["files"]), 2)
        self.assertEqual(index["files"][0], index["files"][1], "zero=0: replicas hold the same tensors")

        def variant(name, edit):
            here = self.path(name)
            shutil.copytree(ckpt, here)
            edit(os.path.join(here, "step-2"))
            return here

        def without_index(step):
            with open(os.path.join(step, "manifest.json")) as f:
                m = json.load(f)
            del m["index"]
            with open(os.path.join(step, "manifest.json"), "w") as f:
                json.dump(m, f)

        def damage_index(step):
            with open(os.path.join(step, "index.json"), "r+b") as f:
                f.seek(30)
                b = f.read(1)
                f.seek(30)
                f.write(bytes([b[0] ^ 1]))

        second_gone = variant("gone", lambda step: os.remove(os.path.join(step, "rank-1.safetensors")))
        rest, r = self.train(one, 1, "one.jsonl", "--checkpoint-dir", second_gone, "--resume")
        self.assertIn("resharded", r.stdout)
        self.assertEqual([p["step"] for p in rest], [2, 3, 4, 5])
        for got in rest:
            want = full[got["step"]]
            self.assertLess(abs(got["loss"] - want["loss"]) / want["loss"], 1e-5)

        rest_old, _ = self.train(one, 1, "old.jsonl", "--checkpoint-dir", variant("old", without_index),
                                 "--resume")
        self.assertEqual([p["loss"] for p in rest_old], [p["loss"] for p in rest])

        def both(step):
            without_index(step)
            os.remove(os.path.join(step, "rank-1.safetensors"))
        def rewrite_index(change):
            # An edited index.json with the manifest's size and checksum made to match,
            # so that its contents, not its checksum, are what is refused.
            def edit(step):
                with open(os.path.join(step, "index.json")) as f:
                    doc = json.load(f)
                data = json.dumps(change(doc)).encode()
                with open(os.path.join(step, "index.json"), "wb") as f:
                    f.write(data)
                with open(os.path.join(step, "manifest.json")) as f:
                    m = json.load(f)
                m["index"].update(bytes=len(data), xxh3_64="0x%016x" % mtp.checksum64(data))
                with open(os.path.join(step, "manifest.json"), "w") as f:
                    json.dump(m, f)
            return edit

        def bad_count(doc):
            doc["files"][0][next(iter(doc["files"][0]))] = "x"
            return doc

        def bad_offset(doc):
            doc["files"][0]["adam_m/w@abc"] = 4
            return doc

        def one_file(doc):
            doc["files"].pop()
            return doc

        def manifest_field(value):
            def edit(step):
                with open(os.path.join(step, "manifest.json")) as f:
                    m = json.load(f)
                m["index"] = value(m["index"])
                with open(os.path.join(step, "manifest.json"), "w") as f:
                    json.dump(m, f)
            return edit

        for name, edit, needle in [("old-gone", both, "rank-1.safetensors"),
                                   ("damaged", damage_index, "index.json' is damaged"),
                                   ("count", rewrite_index(bad_count), "must be an element count, got \"x\""),
                                   ("offset", rewrite_index(bad_offset),
                                    "tensor name 'adam_m/w@abc' has no element offset after its '@'"),
                                   ("files", rewrite_index(one_file), "is not an index of the manifest's 2 files"),
                                   ("entry", manifest_field(lambda e: []),
                                    "manifest.json field 'index' must name a file and its xxh3_64"),
                                   ("size", manifest_field(lambda e: dict(e, bytes=e["bytes"] + 1)),
                                    "index.json' is damaged: ")]:
            with self.subTest(name):
                self.check_fails(common.run([one, "--steps", 6, "--checkpoint-dir", variant(name, edit),
                                             "--resume"], timeout=120), needle)

if __name__ == "__main__":
    common.main()
