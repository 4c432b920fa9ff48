#!/usr/bin/env python3
"""Canonical sampling (DESIGN.md section 2) against a Python implementation of
the formula: what every load_microbatch instruction loads (--dump-data) for
dp = 1 and dp = 2 (two MPI ranks), with and without --shuffle, across
wrap-arounds of the window count (--shuffle: every epoch reads every window once,
in an order of its own); and the default corpus as a shard.
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


# Epoch 1's order of 10 windows under --shuffle 42 (a fixed value, like the one of epoch 0
# below: a change of the PRNG, of Fisher-Yates or of the epoch seeds changes every run).
EPOCH1_OF_42 = [4, 9, 1, 8, 7, 0, 2, 3, 5, 6]


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
        self.assertNotEqual(ref.perm(0), sorted(ref.perm(0)))

    def windows_read(self, dp, seq):
        """The window of every sequence the runtime loaded, by position s*G + k, from the
        dumps of a run on np.arange tokens (a window's first token is its index * seq)."""
        read = {}
        for d in range(dp):
            path = self.path("dump.jsonl") + ("" if dp == 1 else f".rank-{d}")
            with open(path) as f:
                for row in map(json.loads, f):
                    x = np.array(row["tokens"]).reshape(-1, seq)
                    for b in range(len(x)):
                        k = (row["microbatch"] * dp + d) * len(x) + b
                        read[(row["step"], k)] = int(x[b][0]) // seq
        return read

    def test_shuffle_reshuffles_each_epoch(self):
        # W = 20 windows, G = 2*3*2 = 12 sequences a step: 9 steps read 5.4 epochs, steps
        # 1, 3, 4, 6 and 8 straddle an epoch's end. Each epoch reads every window once,
        # in its own order; the first epoch in the order of the one permutation of old.
        seed, W, G = 17, 20, 12
        self.check(np.arange(103), batch=2, seq=5, dp=2, microbatches=3, steps=9, shuffle=seed)
        read = self.windows_read(dp=2, seq=5)
        order = [read[(p // G, p % G)] for p in range(9 * G)]
        epochs = [order[e * W:(e + 1) * W] for e in range(5)]
        for e, windows in enumerate(epochs):
            self.assertEqual(sorted(windows), list(range(W)), f"epoch {e}")
        self.assertEqual(epochs[0], reference.shuffle_permutation(W, seed))
        self.assertEqual(len({tuple(w) for w in epochs}), 5, "an epoch repeats another's order")

    def test_shuffle_global_batch_larger_than_an_epoch(self):
        # W = 5 windows, G = 12: every step reads two whole epochs and parts of others.
        self.check(np.arange(26), batch=3, seq=5, dp=1, microbatches=4, steps=4, shuffle=8)
        read = self.windows_read(dp=1, seq=5)
        order = [read[(p // 12, p % 12)] for p in range(48)]
        for e in range(48 // 5):
            self.assertEqual(sorted(order[5 * e:5 * e + 5]), list(range(5)), f"epoch {e}")

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
        self.assertEqual(reference.epoch_shuffle_seed(42, 0), 42)
        self.assertEqual(reference.shuffle_permutation(10, reference.epoch_shuffle_seed(42, 1)),
                         EPOCH1_OF_42)

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
