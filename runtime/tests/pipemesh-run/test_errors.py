#!/usr/bin/env python3
"""Bad inputs give one clear error line and a non-zero exit, never a crash or a
hang: damaged plans (magic, version, truncation, checksum, manifest fields,
buffer tables, unknown ops and attributes, malformed instructions, attention heads that
do not group), bad data
(missing file, bad header, short file, tokens outside the vocabulary), a world size that
does not match the plan, an elided plan (one program per pipeline rank) that
lacks one or whose listed programs name another replica (a peer, a tied-group
member, a dp group) or would put a replica's shard past the padding, token ids
out of an embedding table's range, and bad command lines.
"""
import copy
import json

import os

import numpy as np

import common
from common import mtp


TINY = dict(batch=2, seq=8, vocab=256, embd=16, heads=2)


def tiny():
    b, _ = mtp.build_tiny_gpt(**TINY)
    return b


def embedding_builder(rows, vocab):
    """A plan that loads 4 tokens and looks them up in a table of `rows` rows."""
    b = mtp.Builder(batch=1, seq=4, vocab=vocab)
    table = b.param("table", np.ones((rows, 4), np.float32))
    ids = b.input("input_ids", [1, 4])
    tgt = b.input("targets", [1, 4])
    b.control("load_microbatch", index=0, out=[ids, tgt])
    y = b.op("embedding", [table, ids], [1, 4, 4])
    return b, ids, y


class PlanErrors(common.TempDirTest):
    def write(self, name, corrupt=None, manifest=None, builder=None):
        b = builder or tiny()
        path = self.path(name)
        mtp.write_plan(path, manifest if manifest is not None else b.manifest(), b.weights,
                       corrupt=corrupt)
        return path

    def test_missing_plan(self):
        self.check_fails(common.run([self.path("nope.plan"), "--steps", 1]), "cannot open")

    def test_bad_magic(self):
        self.check_fails(common.run([self.write("m.plan", "magic"), "--steps", 1]),
                         "is not a PipeMesh plan")

    def test_wrong_version(self):
        self.check_fails(common.run([self.write("v.plan", "version"), "--steps", 1]),
                         "plan format version 4, this runtime reads 3")

    def test_truncated(self):
        self.check_fails(common.run([self.write("t.plan", "truncate"), "--steps", 1]), "truncated")
        path = self.path("short.plan")
        with open(path, "wb") as f:
            f.write(mtp.MAGIC + b"\x01\x00\x00\x00")
        self.check_fails(common.run([path, "--steps", 1]), "truncated")
        # Shorter than the magic: said so, as pipemesh-sim and --print-plan say it.
        empty = self.path("empty.plan")
        open(empty, "wb").close()
        self.check_fails(common.run([empty, "--steps", 1]),
                         "is not a PipeMesh plan (0 bytes, shorter than the header)")

    def test_damaged_checksum(self):
        self.check_fails(common.run([self.write("c.plan", "checksum"), "--steps", 1]),
                         "is damaged: checksum")

    def test_missing_manifest_field(self):
        b = tiny()
        m = b.manifest()
        del m["ranks"][0]["arena_bytes"]
        self.check_fails(common.run([self.write("f.plan", manifest=m, builder=b), "--steps", 1]),
                         "manifest field 'ranks[0].arena_bytes' is missing")
        m = b.manifest()
        del m["model"]["vocab"]
        self.check_fails(common.run([self.write("g.plan", manifest=m, builder=b), "--steps", 1]),
                         "manifest field 'model.vocab' is missing")

    def test_bad_storage_type_fields(self):
        # The manifest's mixed-precision fields: activations, param_dtype, grad_reduce.
        for field, value in (("activations", "f16"), ("param_dtype", "fp8"),
                             ("grad_reduce", "f16")):
            with self.subTest(field=field):
                b = tiny()
                m = b.manifest()
                m[field] = value
                self.check_fails(
                    common.run([self.write("st.plan", manifest=m, builder=b), "--steps", 1]),
                    field, f"must be f32 or bf16, got '{value}'")

    def test_bad_reduction_dtype(self):
        manifest, weights = mtp.build_mlp(dp=2, zero=1, microbatches=2)
        for rank in manifest["ranks"]:
            for instr in rank["program"]:
                if instr["op"] == "reduce_scatter":
                    instr["dtype"] = "f16"
        path = self.path("rs.plan")
        mtp.write_plan(path, manifest, weights)
        self.check_fails(common.run([path, "--steps", 1], np_=2),
                         "(reduce_scatter)", "\"dtype\" must be \"f32\" or \"bf16\", got \"f16\"")

    def test_bad_adamw_copy(self):
        # An adamw entry whose params=bf16 copy is the f32 parameter itself, or no id.
        for copy, needle in ((None, "params[0].copy must be a bf16 buffer"),
                             ("x", "params[0].copy must be an integer buffer id")):
            with self.subTest(copy=copy):
                b = tiny()
                m = b.manifest()
                adamw = next(i for i in m["ranks"][0]["program"] if i["op"] == "adamw")
                adamw["params"][0]["copy"] = copy if copy else adamw["params"][0]["param"]
                self.check_fails(
                    common.run([self.write("ac.plan", manifest=m, builder=b), "--steps", 1]),
                    "(adamw)", needle)

    def test_unknown_adamw_entry_field(self):
        # A misspelled "decay" would update with the default decay: refused by name.
        b = tiny()
        m = b.manifest()
        adamw = next(i for i in m["ranks"][0]["program"] if i["op"] == "adamw")
        adamw["params"][1]["decya"] = False
        self.check_fails(common.run([self.write("ad.plan", manifest=m, builder=b), "--steps", 1]),
                         "(adamw)", "params[1] has a field 'decya' unknown to this runtime")

    def test_param_copy_must_be_bf16(self):
        # A params=bf16 copy declared with the master's f32 type.
        b = tiny()
        m = b.manifest()
        buf = next(x for x in m["ranks"][0]["buffers"] if x["kind"] == "param")
        buf["kind"] = "param_copy"
        self.check_fails(common.run([self.write("pc.plan", manifest=m, builder=b), "--steps", 1]),
                         "(param_copy) must be bf16")

    def test_buffer_outside_arena(self):
        b = tiny()
        m = b.manifest()
        m["ranks"][0]["arena_bytes"] -= 64
        self.check_fails(common.run([self.write("a.plan", manifest=m, builder=b), "--steps", 1]),
                         "lies outside the")

    def test_persistent_overlap(self):
        b = tiny()
        m = b.manifest()
        bufs = m["ranks"][0]["buffers"]
        act = next(x for x in bufs if x["kind"] == "activation")
        param = next(x for x in bufs if x["kind"] == "param")
        act["offset"] = param["offset"]
        self.check_fails(common.run([self.write("o.plan", manifest=m, builder=b), "--steps", 1]),
                         "overlap")

    def test_unknown_op(self):
        b = tiny()
        m = b.manifest()
        m["ranks"][0]["program"].insert(3, {"op": "frobnicate", "in": [0], "out": [1]})
        self.check_fails(common.run([self.write("u.plan", manifest=m, builder=b), "--steps", 1]),
                         "instruction 3 (frobnicate): unknown op 'frobnicate'")

    def test_unknown_attribute(self):
        # An attribute no binder asks about may change what the op computes
        # (attention's window did): the runtime refuses it by name instead of
        # computing the op without it.
        b = tiny()
        m = b.manifest()
        prog = m["ranks"][0]["program"]
        i = next(k for k, x in enumerate(prog) if x["op"] == "attention")
        prog[i].setdefault("attrs", {})["sink_tokens"] = 4
        r = self.check_fails(common.run([self.write("a.plan", manifest=m, builder=b), "--steps", 1]),
                             f"instruction {i} (attention): attribute 'sink_tokens' is unknown "
                             "to this runtime's 'attention'")
        self.assertNotIn("step 1/", r.stdout, "the error must come before any step runs")

    def test_unknown_field(self):
        # The same for a field outside "attrs": a misspelled "accumulate" would
        # overwrite the gradient instead of adding to it, and a "scale" on a
        # matmul that does not accumulate would be dropped. Both are refused.
        b, _, y = embedding_builder(16, 16)
        w = b.param("w", np.ones((4, 4), np.float32))
        b.emit("matmul", [b.reshape(y, [4, 4]), w], [b.grad("w")])
        m = b.manifest()
        prog = m["ranks"][0]["program"]
        i = next(k for k, x in enumerate(prog) if x["op"] == "matmul")
        for field, value, message in (
                ("acumulate", True, "field 'acumulate' is unknown to this runtime's 'matmul'"),
                ("scale", 0.5, '"scale" 0.5 applies only to an accumulating matmul')):
            with self.subTest(field=field):
                bad = copy.deepcopy(m)
                bad["ranks"][0]["program"][i][field] = value
                r = self.check_fails(self.run_tokens(b, bad, [3, 5, 7, 7, 1, 2]),
                                     f"instruction {i} (matmul)", message)
                self.assertNotIn("step 1/", r.stdout, "the error must come before any step runs")
        # The compiler's annotations (action, bytes, flops) change nothing and are accepted.
        fine = copy.deepcopy(m)
        fine["ranks"][0]["program"][i].update(action="F0.0", bytes=128, flops=256)
        r = self.run_tokens(b, fine, [3, 5, 7, 7, 1, 2])
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_attention_heads_that_do_not_group(self):
        # k and v may have fewer heads than q (grouped-query attention) only when
        # theirs divide q's: 3 key heads for 4 query heads is refused by name.
        b = mtp.Builder(batch=1, seq=4, vocab=256)
        q = b.param("q", np.ones((1, 4, 4, 2), np.float32))
        k = b.param("k", np.ones((1, 3, 4, 2), np.float32))
        v = b.param("v", np.ones((1, 3, 4, 2), np.float32))
        b.op("attention", [q, k, v], [1, 4, 4, 2], scale=1.0, causal=True)
        self.check_fails(common.run([self.write("g.plan", builder=b), "--steps", 1]),
                         "instruction 0 (attention): q 1x4x4x2, k 1x3x4x2 and v 1x3x4x2 do not "
                         "fit [..., H, Tq, D], [..., H / g, Tk, D]")

    def test_reduce_result_shape_against_keepdims(self):
        # The result must have the input's shape with the reduced axes dropped, or kept
        # as 1 with keepdims: the same element count in another shape is refused.
        b = tiny()
        m = b.manifest()
        prog = m["ranks"][0]["program"]
        i = next(k for k, x in enumerate(prog)
                 if x["op"] == "reduce_sum" and x["attrs"].get("keepdims") is False)
        prog[i]["attrs"]["keepdims"] = True
        self.check_fails(common.run([self.write("r.plan", manifest=m, builder=b), "--steps", 1]),
                         f"instruction {i} (reduce_sum)", "reduced over the axes keeping them")

    def test_bad_wait_keep(self):
        for op in ("wait_sends", "wait_collectives"):
            with self.subTest(op=op):
                b = tiny()
                m = b.manifest()
                m["ranks"][0]["program"].insert(3, {"op": op, "keep": -1})
                self.check_fails(
                    common.run([self.write("k.plan", manifest=m, builder=b), "--steps", 1]),
                    f'instruction 3 ({op}): "keep" must be a non-negative integer, got -1')

    def test_malformed_instruction(self):
        b = tiny()
        m = b.manifest()
        prog = m["ranks"][0]["program"]
        i = next(k for k, x in enumerate(prog) if x["op"] == "matmul")
        prog[i]["in"] = list(reversed(prog[i]["in"][:2]))
        r = self.check_fails(common.run([self.write("x.plan", manifest=m, builder=b), "--steps", 1]),
                             f"instruction {i} (matmul)")
        self.assertNotIn("step 1/", r.stdout, "the error must come before any step runs")

    def run_tokens(self, b, manifest, tokens):
        """Writes `manifest` (of builder `b`) and a data file of `tokens`; runs one step."""
        path = self.path("t.plan")
        mtp.write_plan(path, manifest, b.weights)
        data = self.path("d.bin")
        common.write_shard(data, tokens)
        return common.run([path, "--data", data, "--steps", 1])

    def test_bad_embedding_grad_accumulate(self):
        # The compiler's embedding_grad into a parameter's gradient carries
        # "accumulate": true; anything but a boolean is refused.
        b, ids, dy = embedding_builder(16, 16)
        b.op("embedding_grad", [dy, ids], [16, 4])
        m = b.manifest()
        prog = m["ranks"][0]["program"]
        i = next(k for k, x in enumerate(prog) if x["op"] == "embedding_grad")
        prog[i]["accumulate"] = "yes"
        self.check_fails(self.run_tokens(b, m, [3, 5, 7, 7, 1, 2]),
                         f"instruction {i} (embedding_grad)",
                         "field 'accumulate' must be true or false, got \"yes\"")

    def test_bad_matmul_accumulate(self):
        # The compiler's weight-gradient GEMM into a parameter's gradient
        # carries "accumulate": true and no bias (the bias would be added into
        # the gradient); a bias, or a non-boolean, is refused by name.
        b, _, y = embedding_builder(16, 16)
        w = b.param("w", np.ones((4, 4), np.float32))
        bias = b.param("bias", np.ones((4,), np.float32))
        b.emit("matmul", [b.reshape(y, [4, 4]), w, bias], [b.grad("w")])
        m = b.manifest()
        prog = m["ranks"][0]["program"]
        i = next(k for k, x in enumerate(prog) if x["op"] == "matmul")
        for value, message in ((True, "accumulate cannot add a bias"),
                               ("yes", "field 'accumulate' must be true or false, got \"yes\"")):
            prog[i]["accumulate"] = value
            prog[i]["scale"] = 0.5
            self.check_fails(self.run_tokens(b, m, [3, 5, 7, 7, 1, 2]),
                             f"instruction {i} (matmul)", message)

    def test_embedding_id_out_of_range(self):
        # A table of 10 rows in a model whose vocabulary (and data) reaches 256.
        b, _, _ = embedding_builder(10, 256)
        self.check_fails(self.run_tokens(b, b.manifest(), [3, 5, 200, 7, 1, 2]),
                         "instruction 1 (embedding)", "token id 200 at position 2",
                         "out of range [0, 10)")


class DataErrors(common.TempDirTest):
    def setUp(self):
        super().setUp()
        self.plan = self.write_tiny_plan("p.plan", **TINY)

    def test_missing_data_file(self):
        self.check_fails(common.run([self.plan, "--data", self.path("none.bin"), "--steps", 1]),
                         "data file", "none.bin", "cannot open")

    def test_tokens_outside_vocabulary(self):
        data = self.path("big.bin")
        common.write_shard(data, [1, 2, 3, 255, 256, 9] * 10)
        self.check_fails(common.run([self.plan, "--data", data, "--steps", 1]),
                         "token 256 at position 4", "outside the plan's vocabulary of 256")

    def test_bad_header(self):
        data = self.path("bad.bin")
        with open(data, "wb") as f:
            f.write(np.array([12345, 1, 4] + [0] * 253, np.int32).tobytes() + b"\0" * 8)
        self.check_fails(common.run([self.plan, "--data", data, "--steps", 1]), "bad header: magic 12345")
        with open(data, "wb") as f:
            f.write(np.array([20240801, 1, 4] + [0] * 253, np.int32).tobytes() + b"\0" * 16)
        self.check_fails(common.run([self.plan, "--data", data, "--steps", 1]),
                         "version 1 with magic 20240801, this runtime reads version 7 (uint32 tokens)")
        with open(data, "wb") as f:
            f.write(b"tiny")
        self.check_fails(common.run([self.plan, "--data", data, "--steps", 1]), "too short")

    def test_short_file(self):
        data = self.path("short.bin")
        common.write_shard(data, list(range(100)))
        raw = common.read_bytes(data)
        with open(data, "wb") as f:
            f.write(raw[:-10])
        self.check_fails(common.run([self.plan, "--data", data, "--steps", 1]),
                         "is short: the header announces 100 tokens")

    def test_too_few_tokens(self):
        data = self.path("few.bin")
        common.write_shard(data, [1, 2, 3])
        self.check_fails(common.run([self.plan, "--data", data, "--steps", 1]), "too few")

    def test_default_corpus_vocab_too_small(self):
        b, _ = mtp.build_zoo()  # vocab 64 < the corpus's bytes
        path = self.path("z.plan")
        mtp.write_plan(path, b.manifest(), b.weights)
        self.check_fails(common.run([path, "--steps", 1]), "default corpus", "vocabulary has only 64")


class WorldSize(common.TempDirTest):
    def test_plan_needs_more_ranks(self):
        b = tiny()
        m = b.manifest()
        m["parallel"]["world_size"] = 2
        m["parallel"]["dp"] = 2
        r1 = copy.deepcopy(m["ranks"][0])
        r1["rank"] = 1
        m["ranks"].append(r1)
        path = self.path("w2.plan")
        mtp.write_plan(path, m, b.weights)
        self.check_fails(common.run([path, "--steps", 1]),
                         "compiled for world size 2", "this job has 1 process")

    def test_job_has_more_ranks(self):
        b = tiny()
        path = self.path("w1.plan")
        mtp.write_plan(path, b.manifest(), b.weights)
        r = self.check_fails(common.run([path, "--steps", 1], np_=2, timeout=120),
                             "compiled for world size 1", "this job has 2 processes")
        self.assertNotIn("step 1/", r.stdout)


class ElidedReplicas(common.TempDirTest):
    """A plan for dp > 1 lists dp rank 0's program of each pipeline rank
    (parallel.replicas_elided); one that lacks a pipeline rank or lists another
    replica is refused by name. Each process derives only its own replica, so
    the cross-rank checks run on the listed programs: a peer or tied-group
    member that is not a listed rank, a dp group that is not the listed rank's
    replicas, a shard that a replica would hold past the padding are refused
    alike by every rank (the uniform ones reported once)."""

    def elided(self, keep, world_size=None, edit=None):
        m, weights = mtp.build_mlp(pp=2, dp=2, zero=1, microbatches=2)
        m["ranks"] = [r for r in m["ranks"] if r["rank"] in keep]
        m["parallel"]["replicas_elided"] = True
        if world_size is not None:
            m["parallel"]["world_size"] = world_size
        if edit:
            edit({r["rank"]: r for r in m["ranks"]})
        path = self.path("elided.plan")
        mtp.write_plan(path, m, weights)
        return path

    def check_uniform(self, edit, *needles):
        r = self.check_fails(common.run([self.elided({0, 2}, edit=edit), "--steps", 1], np_=4,
                                        timeout=120), *needles)
        self.assertEqual(r.stderr.count(needles[-1]), 1, "rank 0 alone reports:\n" + r.stderr)
        self.assertNotIn("step 1/", r.stdout)

    def test_peer_not_listed(self):
        # Rank 0's sends go to rank 3, replica 1 of pipeline rank 1: replica
        # d of rank 0 would send to 3 + d, which does not receive from it.
        def edit(ranks):
            for ins in ranks[0]["program"]:
                if ins["op"] == "send":
                    ins["peer"] = 3
        self.check_uniform(edit, "(send) has peer rank 3, dp rank 1 of pipeline rank 1",
                           "in a plan with replicas_elided the listed programs send to and "
                           "receive from dp rank 0 of a pipeline rank")

    def test_tied_member_not_listed(self):
        def edit(ranks):
            for r in ranks.values():
                r["groups"]["tied"] = [0, 3]
        self.check_uniform(edit, "rank 0's tied group [0, 3] names rank 3, dp rank 1 of pipeline "
                           "rank 1: in a plan with replicas_elided a tied group lists dp rank 0")

    def test_dp_group_not_the_replicas(self):
        def edit(ranks):
            ranks[2]["groups"]["dp"] = [2, 1]
        self.check_uniform(edit, "rank 3's dp group [2, 1] does not contain it")

    def test_check_rank(self):
        # --check-rank R reads the plan as rank R's process does, in one process:
        # a replica's program derived, the cross-rank checks run, nothing trained.
        plan = self.elided({0, 2})
        r = self.check_ok(common.run([plan, "--check-rank", 3]))
        self.assertIn("rank 3 of 4 (pp_rank 1, dp_rank 1)", r.stdout)
        self.assertIn("2 listed program(s), this rank's derived from its dp rank 0's", r.stdout)
        r = self.check_ok(common.run([plan, "--check-rank", 0]))
        self.assertIn("rank 0 of 4 (pp_rank 0, dp_rank 0)", r.stdout)
        self.assertNotIn("derived", r.stdout)
        self.check_fails(common.run([plan, "--check-rank", 4]), "--check-rank 4", "has world size 4")
        self.check_fails(common.run([plan, "--check-rank", -1]), "--check-rank")
        # What a job would refuse, --check-rank refuses with the same words.
        def edit(ranks):
            for ins in ranks[0]["program"]:
                if ins["op"] == "send":
                    ins["peer"] = 3
        self.check_fails(common.run([self.elided({0, 2}, edit=edit), "--check-rank", 1]),
                         "(send) has peer rank 3, dp rank 1 of pipeline rank 1")

    def test_shard_past_the_padding_on_a_replica(self):
        # dp rank 0 of pipeline rank 1 holds the second shard of each
        # parameter: its replica would hold a third, past padded_numel.
        def edit(ranks):
            for b in ranks[2]["buffers"]:
                if "shard_numel" in b:
                    b["elem_offset"] = b["shard_numel"]
        self.check_fails(common.run([self.elided({0, 2}, edit=edit), "--steps", 1], np_=4,
                                    timeout=120),
                         "of rank 2 (as rank 3, its dp replica 1) is a shard", "past the padded_numel")

    def test_missing_pipeline_rank(self):
        self.check_fails(common.run([self.elided({0}), "--steps", 1], np_=4, timeout=120),
                         "manifest field 'ranks'", "no program for pipeline rank 1 (rank 2)")

    def test_world_size_not_pp_times_dp(self):
        self.check_fails(common.run([self.elided({0, 2}, world_size=3), "--steps", 1], np_=3,
                                    timeout=120),
                         "manifest field 'parallel.world_size'", "is 3, not pp x dp = 4")

    def test_listed_replica_other_than_zero(self):
        self.check_fails(common.run([self.elided({0, 1, 2}), "--steps", 1], np_=4, timeout=120),
                         "manifest field 'ranks[1].rank'", "is 1: a plan with replicas_elided")


class CommandLine(common.TempDirTest):
    def test_nonfinite_gradient_norm_stops_before_the_update(self):
        # A learning rate of 1e30 makes step 1's update overflow step 2's forward: step 2's
        # gradient norm is not finite, and the run stops before writing NaN into the weights
        # (its checkpoint after step 1 stays usable). --nan-check off trains on regardless.
        path = self.write_tiny_plan("p.plan", **TINY)
        ckpt = self.path("ckpt")
        r = self.check_fails(common.run([path, "--steps", 4, "--lr", "1e30", "--checkpoint-dir", ckpt,
                                         "--checkpoint-every", 1]),
                             "instruction", "(adamw): step 2: the global gradient norm is",
                             "stopped before the update")
        # Not finite: inf, or nan without the sign bit printf would show ("-nan").
        self.assertRegex(r.stderr, r"the global gradient norm is (inf|nan): stopped")
        self.assertIn("step 1/4", r.stdout)
        self.assertNotIn("step 2/4", r.stdout)
        self.assertEqual(sorted(os.listdir(ckpt)), ["latest", "step-1"])
        weights = mtp.read_safetensors(common.read_bytes(os.path.join(ckpt, "step-1", "rank-0.safetensors")))
        self.assertTrue(all(np.isfinite(v).all() for v in weights.values()))
        log = self.path("off.jsonl")
        r = self.check_ok(common.run([path, "--steps", 4, "--lr", "1e30", "--nan-check", "off",
                                      "--log-json", log]))
        self.assertEqual(len(common.read_log(log)), 4)
        self.assertNotIn("-nan", r.stdout + r.stderr)
        # Several ranks reach the same verdict: rank 0 alone reports it.
        manifest, weights = mtp.build_mlp(dp=2, microbatches=1)
        dp2 = self.path("dp2.plan")
        mtp.write_plan(dp2, manifest, weights)
        r = self.check_fails(common.run([dp2, "--steps", 4, "--lr", "1e30"], np_=2, timeout=120),
                             "the global gradient norm is")
        self.assertEqual(r.stderr.count("the global gradient norm is"), 1, r.stderr)

    def test_bad_flags(self):
        path = self.write_tiny_plan("p.plan", **TINY)
        # What the command line alone rules out exits 2 (docs/pipemesh-run.md, Failures),
        # before a backend is loaded or the plan read; a backend this installation does
        # not have is found when loading it (1).
        val = self.path("val.bin")
        common.write_shard(val, np.arange(300) % 64)
        cases = [([path], "--steps N is required", 2),
                 ([path, "--steps", "x"], "--steps expects an integer", 2),
                 ([path, "--steps", 1, "--lr-schedule", "step"], "constant, cosine, linear or wsd", 2),
                 ([path, "--steps", 1, "--nan-check", "maybe"], "--nan-check must be on or off", 2),
                 ([path, "--steps", 1, "--max-minutes", "-1"], "--max-minutes must not be negative", 2),
                 ([path, "--steps", 1, "--bogus"], "unknown option '--bogus'", 2),
                 ([path, "--steps", 1, "--ranks-per-node", 0], "--ranks-per-node must be at least 1", 2),
                 ([path, "--steps", 1, "--resume"], "--resume needs --checkpoint-dir", 2),
                 ([path, "--steps", 1, "--precision", "bf16"],
                  "--precision bf16 needs a device backend (--backend cuda)", 2),
                 ([path, "--steps", 1, "--backend", "cuda", "--val-data", val],
                  "--val-data: evaluation runs on the cpu backend only (this run uses --backend cuda)", 2),
                 ([path, "--steps", 1, "--backend", "tpu"], "backend 'tpu' is not available", 1)]
        for args, needle, code in cases:
            r = self.check_fails(common.run(args), needle)
            self.assertEqual(r.returncode, code, f"{args}: {r.stderr}")
        # --eval-interval's default spelled out: evaluation after the last step only.
        r = self.check_ok(common.run([path, "--steps", 2, "--val-data", val, "--eval-interval", 0]))
        self.assertEqual(r.stdout.count("eval after step"), 1, r.stdout)


if __name__ == "__main__":
    common.main()
