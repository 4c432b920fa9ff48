#!/usr/bin/env python3
"""Faults of multi-rank jobs end every rank non-zero within a bounded time,
with a message naming the rank, the peer and the instruction — never a hang:

- a receive that never comes (a deadlocked plan) hits --comm-timeout;
- sends nobody receives (rendezvous-sized) make wait_sends hit it too;
- a rank that dies mid-step (PIPEMESH_TEST_EXIT_AT_STEP=RANK:STEP makes it
  _exit(9)): Open MPI's mpirun ends the job at once and the survivors say
  where they were (SIGTERM handler); with mpirun's abort turned off
  (orte_abort_on_non_zero_status=0, as under some launchers) the survivors'
  own deadlines end it, naming the dead peer;
- a world size that does not match the plan fails before any work;
- plans whose ranks do not fit together (a send and its receive of different
  sizes, a receive with no send, groups that disagree) fail before any work.
"""
import copy
import re
import time

import numpy as np

import common
from common import mtp


def p2p_plan(path, programs, sizes=(4,)):
    """A 2-rank plan whose programs are lists of (op, fields) over f32
    buffers x0, x1, ... of the given sizes."""
    ranks = []
    for r, prog in enumerate(programs):
        b = mtp.Builder(batch=1, seq=4, vocab=256, dp=2)
        bufs = [b.buf(f"x{i}", [n]) for i, n in enumerate(sizes)]
        for op, fields in prog:
            fields = dict(fields)
            for key in ("in", "out"):
                if key in fields:
                    fields[key] = [bufs[i] for i in fields[key]]
            b.control(op, **fields)
        ranks.append(b.manifest(rank=r)["ranks"][0])
    mtp.write_plan(path, b.manifest(ranks=ranks), b.weights)
    return path


class Faults(common.TempDirTest):
    def timed(self, args, np_, env=None, timeout=120):
        t0 = time.monotonic()
        r = common.run(args, np_=np_, env=env, timeout=timeout)
        return r, time.monotonic() - t0

    def test_recv_that_never_comes(self):
        # Each rank first waits for the other: a deadlock the compiler's check
        # would refuse, here to show that the runtime does not hang on it.
        plan = p2p_plan(self.path("deadlock.plan"), [
            [("recv", {"out": [0], "peer": 1, "tag": 7}), ("send", {"in": [0], "peer": 1, "tag": 8})],
            [("recv", {"out": [0], "peer": 0, "tag": 8}), ("send", {"in": [0], "peer": 0, "tag": 7})]])
        r, secs = self.timed([plan, "--steps", 1, "--comm-timeout", 3], np_=2)
        self.check_fails(r)
        m = re.search(r"pipemesh-run: error: rank ([01]), instruction 0 \(recv\): receive of buffer 0 'x0' "
                      r"\(16 bytes\) from rank ([01]), tag ([78]) did not complete within 3 s "
                      r"\(--comm-timeout\)", r.stderr)
        self.assertTrue(m, r.stderr)
        me, peer, tag = map(int, m.groups())
        self.assertEqual((peer, tag), (1 - me, 7 if me == 0 else 8))
        self.assertLess(secs, 20, "the job must end soon after the deadline")
        print(f"\n  deadlocked recv: {secs:.1f} s with --comm-timeout 3: {m.group(0)}")

    def test_sends_nobody_receives(self):
        # Messages above the eager limit complete only when received: both
        # ranks send first and wait for their sends.
        n = 1 << 18  # 1 MiB of floats
        plan = p2p_plan(self.path("sends.plan"), [
            [("send", {"in": [0], "peer": 1, "tag": 1}), ("wait_sends", {}),
             ("recv", {"out": [1], "peer": 1, "tag": 2})],
            [("send", {"in": [0], "peer": 0, "tag": 2}), ("wait_sends", {}),
             ("recv", {"out": [1], "peer": 0, "tag": 1})]], sizes=(n, n))
        r, secs = self.timed([plan, "--steps", 1, "--comm-timeout", 3], np_=2)
        self.check_fails(r)
        m = re.search(r"rank ([01]), instruction 1 \(wait_sends\): send of buffer 0 'x0' \(1048576 bytes\) "
                      r"to rank [01], tag [12] \(posted by instruction 0\) did not complete within 3 s", r.stderr)
        self.assertTrue(m, r.stderr)
        self.assertLess(secs, 20)
        print(f"\n  unreceived sends: {secs:.1f} s: {m.group(0)}")

    def mlp_plan(self, **kw):
        manifest, weights = mtp.build_mlp(**kw)
        path = self.path("mlp.plan")
        mtp.write_plan(path, manifest, weights)
        return path

    def test_killed_rank_mpirun_ends_the_job(self):
        plan = self.mlp_plan(pp=2, microbatches=4)
        r, secs = self.timed([plan, "--steps", 6, "--comm-timeout", 30], np_=2,
                             env={"PIPEMESH_TEST_EXIT_AT_STEP": "1:2"})
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertIn("rank 1 exits with status 9 before instruction", r.stderr)
        # rank 0 was waiting for rank 1 (a gradient, or the end of the step).
        m = re.search(r"pipemesh-run: error: rank 0: terminated by signal 15 during step 3, "
                      r"(instruction \d+ \(recv of buffer \d+ from rank 1, tag \d+\)|the step-end all-reduce)",
                      r.stderr)
        self.assertTrue(m, r.stderr)
        self.assertIn("step 2/6", r.stdout)
        self.assertNotIn("step 3/6", r.stdout)
        self.assertLess(secs, 15, "mpirun should end the job well before --comm-timeout 30")
        print(f"\n  killed rank 1 (mpirun aborts): {secs:.1f} s: {m.group(0)}")

    def test_killed_rank_deadline(self):
        # Without mpirun's abort (as under some launchers), the survivor's own
        # deadline ends the job, naming the peer and the instruction.
        env = {"PIPEMESH_TEST_EXIT_AT_STEP": "1:1", "OMPI_MCA_orte_abort_on_non_zero_status": "0"}
        for kw, pattern in [
                (dict(pp=2, microbatches=4),
                 r"rank 0, instruction \d+ \(recv\): receive of buffer \d+ 'dx.recv.\d' \(\d+ bytes\) from "
                 r"rank 1, tag \d+ did not complete within 3 s \(--comm-timeout\): rank 1 died"),
                (dict(dp=2, zero=1, microbatches=2),
                 r"rank 0, instruction \d+ \(reduce_scatter\): reduce-scatter of \d+ buffer\(s\) .* on the dp "
                 r"group did not complete within 3 s \(--comm-timeout\): a rank of the group died")]:
            with self.subTest(**kw):
                r, secs = self.timed([self.mlp_plan(**kw), "--steps", 4, "--comm-timeout", 3], np_=2, env=env)
                self.check_fails(r)
                m = re.search(pattern, r.stderr)
                self.assertTrue(m, r.stderr)
                self.assertLess(secs, 20)
                print(f"\n  killed rank 1 ({kw}), no mpirun abort: {secs:.1f} s: {m.group(0)}")


class FailFast(common.TempDirTest):
    """Mistakes every rank can see fail before any work, reported once."""

    def test_world_size_mismatch(self):
        manifest, weights = mtp.build_mlp(pp=2, microbatches=2)
        plan = self.path("mlp.plan")
        mtp.write_plan(plan, manifest, weights)
        for np_ in (1, 4):
            t0 = time.monotonic()
            r = common.run([plan, "--steps", 2], np_=np_, timeout=120)
            secs = time.monotonic() - t0
            self.check_fails(r, "is compiled for world size 2 (pp=2 dp=1)",
                             f"this job has {np_} process", "run it with mpirun -np 2")
            self.assertNotIn("step 1/", r.stdout)
            self.assertEqual(r.stderr.count("compiled for world size"), 1, "rank 0 alone reports")
            self.assertLess(secs, 20)

    def test_plans_whose_ranks_do_not_fit(self):
        sizes = (4, 8)
        cases = [
            ([[("send", {"in": [0], "peer": 1, "tag": 3})], [("recv", {"out": [1], "peer": 0, "tag": 3})]],
             "rank 0, instruction 0 sends 16 bytes to rank 1 with tag 3 but the matching receive "
             "(rank 1, instruction 0) expects 32"),
            ([[], [("recv", {"out": [0], "peer": 0, "tag": 5})]],
             "rank 1, instruction 0 receives from rank 0 with tag 5 but rank 0 never sends with that tag"),
            ([[("send", {"in": [0], "peer": 0, "tag": 1})], []], "has peer 0: it must be another rank"),
            ([[("allreduce", {"group": "dp", "bufs": [0]})], [("allreduce", {"group": "dp", "bufs": [1]})]],
             "collective 0 is allreduce of [4] elements on rank 0 (instruction 0) but allreduce of [8] on rank 1"),
            ([[("allreduce", {"group": "dp", "bufs": [0]})], []],
             "rank 0 issues 1 collectives per step, rank 1 0"),
        ]
        for programs, needle in cases:
            with self.subTest(needle=needle):
                plan = p2p_plan(self.path("bad.plan"), programs, sizes)
                r = self.check_fails(common.run([plan, "--steps", 1], np_=2, timeout=120), needle)
                self.assertEqual(r.stderr.count(needle), 1, "rank 0 alone reports")
        # Groups that disagree.
        manifest, weights = mtp.build_mlp(dp=2, microbatches=2)
        bad = copy.deepcopy(manifest)
        bad["ranks"][1]["groups"]["dp"] = [1, 0]
        path = self.path("groups.plan")
        mtp.write_plan(path, bad, weights)
        self.check_fails(common.run([path, "--steps", 1], np_=2, timeout=120),
                         "rank 0's dp group is [0, 1] but rank 1's is [1, 0]")


if __name__ == "__main__":
    common.main()
