#!/usr/bin/env python3
"""How `mpirun` places a one-rank job's threads. Open MPI binds each rank to one core
by default when it launches two ranks or fewer, and the BLAS and OpenMP thread pools
then fit that one core: `mpirun -np 1 pipemesh-run` (the README's main job) trained
on one core of many. pipemesh-run widens that default binding to every CPU the
process may use when it is the only rank on its node, says so in its start-up line,
and keeps any binding the user asked for (--bind-to, --map-by, --cpu-set). Needs a
machine with two CPUs or more (skipped otherwise).
"""
import os
import re
import subprocess
import unittest

import common


def launch(plan, *mpirun_args):
    env = dict(os.environ, **common.MPI_ENV)
    env.pop("OMPI_MCA_rmaps_base_oversubscribe")  # as a user's shell has it
    cmd = ["mpirun", "-np", "1", *mpirun_args, common.PIPEMESH_RUN, plan, "--steps", "1"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


def cpus(out):
    """The CPU count of pipemesh-run's start-up line."""
    m = re.search(r", (\d+) CPUs?\b", out)
    return int(m.group(1)) if m else None


@unittest.skipUnless(len(os.sched_getaffinity(0)) >= 2, "needs two CPUs or more")
class Launch(common.TempDirTest):
    def setUp(self):
        super().setUp()
        self.plan = self.write_tiny_plan(batch=2, seq=8, vocab=256, embd=16, heads=2)

    def test_default_binding_of_a_lone_rank_is_widened(self):
        r = self.check_ok(launch(self.plan))
        out = r.stdout + r.stderr
        self.assertEqual(cpus(out), len(os.sched_getaffinity(0)), out)
        self.assertIn("widened from mpirun's default binding to 1", out)

    def test_requested_binding_is_kept(self):
        for args in (["--bind-to", "core"], ["--map-by", "core:PE=1"], ["--cpu-set", "0"]):
            with self.subTest(args=args):
                r = self.check_ok(launch(self.plan, *args))
                out = r.stdout + r.stderr
                self.assertEqual(cpus(out), 1, out)
                self.assertNotIn("widened", out)

    def test_no_binding_asked_away(self):
        r = self.check_ok(launch(self.plan, "--bind-to", "none"))
        out = r.stdout + r.stderr
        self.assertEqual(cpus(out), len(os.sched_getaffinity(0)), out)
        self.assertNotIn("widened", out)


if __name__ == "__main__":
    common.main()
