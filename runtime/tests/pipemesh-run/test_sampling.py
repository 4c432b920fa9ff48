#!/usr/bin/env python3
"""Canonical sampling (DESIGN.md section 2) against a Python implementation of
the formula: what every load_microbatch instruction loads (--dump-data) for
dp = 1 and dp = 2 (two MPI ranks), with and without --shuffle, across
wrap-arounds of the window count; and the default corpus as a shard.
"""
import json
import os
import resource
import signal
import subprocess

import numpy as np

import common
from common import mtp
import reference


def loader_plan(path, batch, seq, vocab, dp, microbatches):
    """A plan that only loads micro-batches (one rank program per DP rank)."""
    ranks = []
    for r in range(dp):
        b = mtp.Builder(batch=batch, seq=seq, vocab=vocab, microbatches=microbatches, dp=dp)
        ids = b.input("input_ids", [batch, seq])
        tgt = b.input("targets", [batch, seq], dtype="i32" if r else "i64")
        for j in range(microbatches):
            b.control("load_microbatch", index=j, out=[ids, tgt])
        ranks.append(b.manifest(rank=r)["ranks"][0])
    m = b.manifest(ranks=ranks)
    mtp.write_plan(path, m, b.weights)


class Sampling(common.TempDirTest):
    def check(self, tokens, batch, seq, dp, microbatches, steps, shuffle=None, vocab=65536):
        """`tokens`: one shard's, or a list of shards' (passed as a glob pattern; a shard
        with a token above 65535 written with uint32 tokens, llm.c's Llama 3 format)."""
        plan = self.path("loader.plan")
        loader_plan(plan, batch, seq, vocab, dp, microbatches)
        if isinstance(tokens, list):
            os.makedirs(self.path("shards"), exist_ok=True)
            for i, t in enumerate(tokens):
                common.write_shard(self.path(f"shards/train_{i:03d}.bin"), t,
                                   np.uint32 if max(t, default=0) > 65535 else np.uint16)
            data = self.path("shards/train_*.bin")
        else:
            data = self.path("data.bin")
            common.write_shard(data, tokens)
        dump = self.path("dump.jsonl")
        args = [plan, "--data", data, "--steps", steps, "--dump-data", dump]
        if shuffle is not None:
            args += ["--shuffle", shuffle]
        self.check_ok(common.run(args, np_=dp if dp > 1 else None, timeout=120))
        ref = reference.Sampler(tokens, seq, batch, dp, microbatches, shuffle)
        seen = 0
        for d in range(dp):
            path = dump if dp == 1 else f"{dump}.rank-{d}"
            with open(path) as f:
                rows = [json.loads(line) for line in f]
            self.assertEqual(len(rows), steps * microbatches)
            for row in rows:
                self.assertEqual(row["dp_rank"], d)
                x, y = ref.microbatch(row["step"], row["microbatch"], d)
                np.testing.assert_array_equal(np.array(row["tokens"]).reshape(batch, seq), x,
                                              err_msg=f"inputs of step {row['step']} mb {row['microbatch']} dp {d}")
                np.testing.assert_array_equal(np.array(row["targets"]).reshape(batch, seq), y)
                seen += 1
        self.assertEqual(seen, dp * steps * microbatches)
        return ref

    def test_dp1(self):
        tokens = np.arange(103)  # W = 20 windows of 5: G = 6 wraps within 4 steps
        ref = self.check(tokens, batch=2, seq=5, dp=1, microbatches=3, steps=7)
        self.assertEqual(ref.W, 20)

    def test_dp1_shuffled(self):
        ref = self.check(np.arange(1000) % 997, batch=3, seq=7, dp=1, microbatches=2, steps=9, shuffle=42)
        self.assertNotEqual(ref.perm, sorted(ref.perm))

    def test_dp2_two_ranks(self):
        self.check(np.arange(260), batch=2, seq=4, dp=2, microbatches=3, steps=6)

    def test_dp2_two_ranks_shuffled(self):
        self.check(np.arange(500), batch=1, seq=6, dp=2, microbatches=2, steps=5, shuffle=3)

    def test_several_shards(self):
        # Windows within each shard, shard after shard in name order: 41 tokens give 8
        # windows of 5, the 4-token shard none (a window needs 6), the last 12; the global
        # batch of 6 wraps in step 3.
        shards = [np.arange(41), 1000 + np.arange(4), 2000 + np.arange(62)]
        ref = self.check(shards, batch=2, seq=5, dp=1, microbatches=3, steps=7)
        self.assertEqual(ref.W, 8 + 0 + 12)
        self.check(shards, batch=1, seq=5, dp=2, microbatches=2, steps=6, shuffle=9)

    def test_uint32_shards(self):
        # llm.c's Llama 3 shards (magic 20240801, version 7): uint32 tokens, here beside a
        # uint16 shard in one dataset.
        shards = [100000 + np.arange(37), np.arange(30)]
        ref = self.check(shards, batch=2, seq=5, dp=1, microbatches=2, steps=5, vocab=100037)
        self.assertEqual(ref.W, 7 + 5)

    def test_shard_pattern_errors(self):
        plan = self.path("loader.plan")
        loader_plan(plan, 1, 4, 100, 1, 1)
        os.makedirs(self.path("d"))
        self.check_fails(common.run([plan, "--steps", 1, "--data", self.path("d/none_*.bin")]),
                         "--data", "none_*.bin", "matches no file")
        common.write_shard(self.path("d/a_0.bin"), np.arange(10))
        common.write_shard(self.path("d/a_1.bin"), np.array([5, 500]))
        self.check_fails(common.run([plan, "--steps", 1, "--data", self.path("d/a_*.bin")]),
                         "a_1.bin", "token 500")
        self.check_fails(common.run([plan, "--steps", 1, "--data", self.path("d/a_0.bin"),
                                     "--val-data", self.path("d/b*.bin")]),
                         "--val-data", "matches no file")

    def test_shuffle_permutation_reference(self):
        # Fixed values: a change of the PRNG or of Fisher-Yates changes every run.
        self.assertEqual(reference.shuffle_permutation(10, 42), [0, 9, 5, 8, 6, 4, 7, 2, 1, 3])
        self.assertEqual(reference.SplitMix64(0).next(), 0xE220A8397B1DCDAF)

    def test_default_corpus(self):
        path = self.path("corpus.bin")
        self.check_ok(common.run(["--write-default-corpus", path]))
        tokens = common.read_shard(path)
        self.assertGreater(len(tokens), 90000)
        self.assertLess(int(tokens.max()), 128)
        text = bytes(tokens.astype(np.uint8)).decode("ascii")
        self.assertTrue(text.startswith("Chapter 1\n\n"))

    def test_failed_corpus_write_keeps_the_file(self):
        # Under a 64 KiB file-size limit (the corpus is about 200 KB) the write fails: the
        # file that was there is left as it was, and no temporary is left beside it.
        path = self.path("mine.bin")
        with open(path, "wb") as f:
            f.write(b"the user's own shard")
        def limited():
            resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not death
        r = subprocess.run([common.PIPEMESH_RUN, "--write-default-corpus", path],
                           capture_output=True, text=True, timeout=60, preexec_fn=limited)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("token shard: cannot write", r.stderr)
        self.assertEqual(common.read_bytes(path), b"the user's own shard")
        self.assertEqual(os.listdir(self.dir), ["mine.bin"])


if __name__ == "__main__":
    common.main()
