#!/usr/bin/env python3
"""dp-collectives=hierarchical (compile option): the dp group's all-reduces,
reduce-scatters and all-gathers run within each node, then between the nodes
(MpiCommunicator; nodes of --ranks-per-node consecutive ranks here, where every
rank shares one machine).

- f32 sums: every ZeRO level trains the pp=1 dp=1 losses within 1e-5, as flat
  collectives do (DESIGN.md oracle 3).
- bf16 sums (grad-reduce=bf16): PyTorch summing the replicas in the same order,
  each node's first and then the nodes' (reference.train's node_size), and not in
  the flat replica order.
- A dp group spread unevenly over the nodes is refused by name; on one node the
  collectives run flat and say so; the CUDA backend refuses the plan.
Skipped when PIPEMESH_OPT is not set (a runtime-only build).
"""
import unittest

import common
from generated_gpt import PIPEMESH_OPT, GeneratedGptTest

losses = lambda log: [e["loss"] for e in log]
rel = lambda a, b: abs(a - b) / abs(b)
TWO_NODES = ["--ranks-per-node", "2"]


@unittest.skipUnless(PIPEMESH_OPT, "PIPEMESH_OPT not set")
class HierarchicalDp(GeneratedGptTest):
    STEPS = 6

    def test_every_zero_level_trains_the_one_rank_losses(self):
        _, want = self.train(self.compile("one.plan", "microbatches=4"), "one")
        for zero in (0, 1, 3):
            with self.subTest(zero=zero):
                plan = self.compile(f"z{zero}.plan", f"dp=4 zero={zero} dp-collectives=hierarchical")
                r, got = self.train(plan, f"z{zero}", 4, TWO_NODES)
                self.assertIn("dp collectives hierarchical (2 nodes x 2 ranks per dp group)",
                              r.stdout)
                self.assertEqual(len(got), len(want))
                worst = max(max(rel(g["loss"], w["loss"]), rel(g["grad_norm"], w["grad_norm"]))
                            for g, w in zip(got, want))
                print(f"\n  zero={zero} dp=4 on 2 nodes x 2: worst relative difference to one "
                      f"rank {worst:.1e}")
                self.assertLess(worst, 1e-5)

    def test_bf16_sums_in_the_hierarchical_order(self):
        nodes, _ = self.torch_run("gpt2", dp=4, grad_reduce="bf16", node_size=2)
        chain, _ = self.torch_run("gpt2", dp=4, grad_reduce="bf16")
        # zero 0: the all-reduce (reduce-scatter within, all-reduce between, all-gather
        # within); zero 1: the reduce-scatter.
        for zero in (0, 1):
            with self.subTest(zero=zero):
                plan = self.compile(f"bf16-z{zero}.plan",
                                    f"dp=4 zero={zero} grad-reduce=bf16 dp-collectives=hierarchical")
                _, ours = self.train(plan, f"bf16-z{zero}", 4, TWO_NODES)
                # The step-1 gradient norm is the first value a sum reaches (two members
                # per node and two nodes: each bf16 addition's rounding is the same
                # either way round, so the runtime's sum is exactly PyTorch's in that
                # order).
                norm_nodes = rel(ours[0]["grad_norm"], nodes[0]["grad_norm"])
                norm_chain = rel(ours[0]["grad_norm"], chain[0]["grad_norm"])
                drift = max(rel(a["loss"], b["loss"]) for a, b in zip(ours, nodes))
                print(f"\n  zero={zero}: step-1 gradient norm vs PyTorch's bf16 sums: nodes "
                      f"first {norm_nodes:.1e}, replica order {norm_chain:.1e}; loss over "
                      f"{self.STEPS} steps {drift:.1e}")
                self.assertLess(norm_nodes, 1e-6)
                self.assertGreater(norm_chain, 1e-6)  # the order is visible at all
                # test_grad_reduce_bf16's bound: an ulp of f32 evaluation-order difference
                # in a replica's gradient becomes a bf16 step of an element now and then.
                self.assertLess(drift, 5e-4)

    def test_uneven_nodes_refused(self):
        plan = self.compile("h.plan", "dp=4 zero=1 dp-collectives=hierarchical")
        r = common.run([plan, "--steps", 1, "--ranks-per-node", 3], np_=4)
        self.check_fails(r, "dp-collectives=hierarchical needs the same number of the dp "
                            "group's ranks on every node; the group of ranks 0..3 has 3 on the "
                            "node of rank 0, 1 on the node of rank 3 (nodes: --ranks-per-node 3)")

    def test_one_node_runs_flat(self):
        # Without --ranks-per-node the ranks sharing memory form a node: all four here.
        plan = self.compile("h.plan", "dp=4 zero=1 dp-collectives=hierarchical")
        r = self.check_ok(common.run([plan, "--steps", 1], np_=4))
        self.assertIn("dp collectives flat (rank 0's dp group has 4 ranks on each of 1 node)",
                      r.stdout)

    def test_one_rank_per_node_runs_flat(self):
        plan = self.compile("h2.plan", "dp=2 zero=1 dp-collectives=hierarchical")
        r = self.check_ok(common.run([plan, "--steps", 1, "--ranks-per-node", 1], np_=2))
        self.assertIn("dp collectives flat (rank 0's dp group has 1 rank on each of 2 nodes)",
                      r.stdout)

    def test_groups_laid_out_differently(self):
        # pp=2 dp=4 on nodes of 6 ranks: rank 0's group (ranks 0-3) is on one node and
        # runs flat, the other (4-7) spans two nodes, 2 + 2, and runs hierarchically;
        # the banner says both, and the losses are the one-rank ones.
        _, want = self.train(self.compile("one-m4.plan", "microbatches=4"), "one-m4")
        plan = self.compile("pp2.plan", "pp=2 dp=4 microbatches=1 zero=1 dp-collectives=hierarchical")
        r, got = self.train(plan, "pp2", 8, ["--ranks-per-node", "6"])
        self.assertIn("dp collectives flat (rank 0's dp group has 4 ranks on each of 1 node); "
                      "hierarchical on 4 of the 8 ranks", r.stdout)
        worst = max(rel(g["loss"], w["loss"]) for g, w in zip(got, want))
        self.assertLess(worst, 1e-5)

    def test_cuda_backend_refuses(self):
        self.assert_cuda_refuses("dp=2 dp-collectives=hierarchical", 2)


if __name__ == "__main__":
    common.main()
