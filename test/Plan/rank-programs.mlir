// --pmesh-shard and --pmesh-schedule: the parallel plan in the IR, one
// pmesh.rank_program per pipeline rank, before the emitter lowers it.
//
// RUN: pipemesh-opt %S/Inputs/staged-2-chunks.mlir --pmesh-shard="pp=2 dp=2 zero=1,3" --pmesh-schedule="pp=2 dp=2 microbatches=2 schedule=1f1b" | FileCheck %s
// RUN: pipemesh-opt %S/Inputs/staged-2-chunks.mlir --pmesh-schedule="pp=2 microbatches=2 schedule=zb-h1" | FileCheck %s --check-prefix=ZB
// RUN: pipemesh-opt %S/Inputs/staged-2-chunks.mlir --pmesh-shard="pp=2 dp=2 zero=1,3" --pmesh-schedule="pp=2 dp=2 microbatches=2 schedule=1f1b" | pipemesh-opt | FileCheck %s
//
// The level of a parameter is that of the lowest chunk that uses it: the tied
// @wte (chunks 0 and 1) takes chunk 0's.
// CHECK: module attributes {pmesh.dp = 2 : i64}
// CHECK: pmesh.param @wte : tensor<16x8xf32> {pmesh.zero = 1 : i64}
// CHECK: pmesh.param @w2 : tensor<6x8xf32> {pmesh.zero = 3 : i64}
//
// Rank 0: the previous step's gather of its ZeRO-1 parameters (async, at the
// end of the program) is completed before the first forward; forwards send their activation on channel 0 right after they run;
// a send is completed one action later; each backward receives channel 1
// first. Gradients are reduce-scattered (async) once the last backward that
// accumulates them is done, the tied @wte's too (sharded: the tied group then
// sums the reduced shards, 1/dp of the bytes, after the wait).
// CHECK-LABEL: pmesh.rank_program attributes {pp_rank = 0 : i64, schedule = "1f1b", wait_lag = 1 : i64}
// CHECK-NEXT: pmesh.zero_grads
// CHECK-NEXT: pmesh.wait_collectives
// CHECK-NEXT: pmesh.compute {chunk = 0 : i64, microbatch = 0 : i64, phase = "F"}
// CHECK-NEXT: pmesh.send {channel = 0 : i64, microbatch = 0 : i64, peer = 1 : i64, tag = 0 : i64}
// CHECK-NEXT: pmesh.compute {chunk = 0 : i64, microbatch = 1 : i64, phase = "F"}
// CHECK-NEXT: pmesh.send {channel = 0 : i64, microbatch = 1 : i64, peer = 1 : i64, tag = 1 : i64}
// CHECK-NEXT: pmesh.wait_sends {keep = 1 : i64}
// CHECK-NEXT: pmesh.recv {channel = 1 : i64, microbatch = 0 : i64, peer = 1 : i64, tag = 2 : i64}
// CHECK-NEXT: pmesh.compute {chunk = 0 : i64, microbatch = 0 : i64, phase = "B"}
// CHECK-NEXT: pmesh.wait_sends
// CHECK-NEXT: pmesh.recv {channel = 1 : i64, microbatch = 1 : i64, peer = 1 : i64, tag = 3 : i64}
// CHECK-NEXT: pmesh.compute {chunk = 0 : i64, microbatch = 1 : i64, phase = "B"}
// CHECK-NEXT: pmesh.reduce_scatter_grads {async = true, params = [@wte, @w1, @b1]}
// CHECK-NEXT: pmesh.wait_collectives
// CHECK-NEXT: pmesh.all_reduce_grads {group = "tied", params = [@wte]}
// CHECK-NEXT: pmesh.optimizer_step
// CHECK-NEXT: pmesh.all_gather_params {async = true, params = [@wte, @w1, @b1]}
// CHECK-NEXT: }
// Rank 1 holds @w2 at ZeRO-3: with one chunk, depth-first, each backward is
// a run of its own, reduce-scattered into the shard async (accumulating)
// and completed (wait_collectives keeps the ones issued after it: none
// here) before the next action, so no whole gradient outlives its action;
// the updated shard is not gathered back.
// CHECK-LABEL: pmesh.rank_program attributes {pp_rank = 1 : i64
// CHECK: pmesh.compute {chunk = 1 : i64, microbatch = 0 : i64, phase = "B"}
// CHECK-NEXT: pmesh.send
// CHECK-NEXT: pmesh.reduce_scatter_grads {accumulate = true, async = true, params = [@w2]}
// CHECK-NEXT: pmesh.recv
// CHECK-NEXT: pmesh.wait_collectives{{$}}
// CHECK-NEXT: pmesh.compute {chunk = 1 : i64, microbatch = 1 : i64, phase = "F"}
// CHECK-NEXT: pmesh.wait_sends
// CHECK-NEXT: pmesh.compute {chunk = 1 : i64, microbatch = 1 : i64, phase = "B"}
// CHECK-NEXT: pmesh.send
// CHECK-NEXT: pmesh.reduce_scatter_grads {accumulate = true, async = true, params = [@w2]}
// CHECK: pmesh.optimizer_step
// CHECK-NEXT: pmesh.all_gather_params {async = true, params = [@wte]}
//
// ZeRO-1 gathers run into the next step, one per layer of each chunk (this
// module's parameters name no layer: one per chunk) in the order of the
// chunks' first forwards; each chunk waits for its own only (keep = the
// gathers issued after it), so chunk 1's gather overlaps chunk 0's forwards.
// The waits name their parameters: the emitter lowers each right before the
// first op that reads one (test/Plan/bucketed-collectives.test).
// RUN: pipemesh-opt %S/Inputs/staged-2-chunks.mlir --pmesh-shard="pp=1 vpp=2 dp=2 zero=1" --pmesh-schedule="pp=1 vpp=2 dp=2 microbatches=2 schedule=bfs" | FileCheck %s --check-prefix=OVERLAP
// OVERLAP-LABEL: pmesh.rank_program
// OVERLAP-NEXT: pmesh.zero_grads
// OVERLAP-NEXT: pmesh.wait_collectives {keep = 1 : i64, params = [@wte, @w1, @b1]}
// OVERLAP-NEXT: pmesh.compute {chunk = 0 : i64, microbatch = 0 : i64, phase = "F"}
// OVERLAP-NEXT: pmesh.compute {chunk = 0 : i64, microbatch = 1 : i64, phase = "F"}
// OVERLAP-NEXT: pmesh.wait_collectives {params = [@w2]}
// OVERLAP-NEXT: pmesh.compute {chunk = 1 : i64, microbatch = 0 : i64, phase = "F"}
// OVERLAP: pmesh.optimizer_step
// OVERLAP-NEXT: pmesh.all_gather_params {async = true, params = [@wte, @w1, @b1]}
// OVERLAP-NEXT: pmesh.all_gather_params {async = true, params = [@w2]}
// OVERLAP-NEXT: }
//
// ZeRO-3 runs in an interleaved order (group 1): each chunk's run is
// reduce-scattered async behind the other chunk's actions, two runs'
// reductions in flight at most, and completed (wait_collectives, the other
// chunk's left in flight) before the next run of its chunk starts.
// RUN: pipemesh-opt %S/Inputs/staged-2-chunks.mlir --pmesh-shard="pp=1 vpp=2 dp=2 zero=3" --pmesh-schedule="pp=1 vpp=2 dp=2 microbatches=2 schedule=interleaved group=1" | FileCheck %s --check-prefix=RUNS
// RUNS-LABEL: pmesh.rank_program
// RUNS: pmesh.compute {chunk = 1 : i64, microbatch = 0 : i64, phase = "B"}
// RUNS-NEXT: pmesh.reduce_scatter_grads {accumulate = true, async = true, params = [@w2, @wte]}
// RUNS-NEXT: pmesh.compute {chunk = 0 : i64, microbatch = 1 : i64, phase = "F"}
// RUNS-NEXT: pmesh.compute {chunk = 0 : i64, microbatch = 0 : i64, phase = "B"}
// RUNS-NEXT: pmesh.reduce_scatter_grads {accumulate = true, async = true, params = [@b1, @w1, @wte]}
// RUNS-NEXT: pmesh.compute {chunk = 1 : i64, microbatch = 1 : i64, phase = "F"}
// RUNS-NEXT: pmesh.wait_collectives {keep = 1 : i64}
// RUNS-NEXT: pmesh.compute {chunk = 1 : i64, microbatch = 1 : i64, phase = "B"}
// RUNS-NEXT: pmesh.reduce_scatter_grads {accumulate = true, async = true, params = [@w2, @wte]}
// RUNS-NEXT: pmesh.wait_collectives {keep = 1 : i64}
// RUNS-NEXT: pmesh.compute {chunk = 0 : i64, microbatch = 1 : i64, phase = "B"}
// RUNS-NEXT: pmesh.reduce_scatter_grads {accumulate = true, async = true, params = [@b1, @w1, @wte]}
// RUNS-NEXT: pmesh.wait_collectives{{$}}
// RUNS-NEXT: pmesh.optimizer_step
//
// A breadth-first order peaks in activations before its first backward, so
// a run spans the forwards between its backwards: bfs's last chunk
// alternates F and B, and its two backwards are reduced once.
// RUN: pipemesh-opt %S/Inputs/staged-2-chunks.mlir --pmesh-shard="pp=2 dp=2 zero=3" --pmesh-schedule="pp=2 dp=2 microbatches=2 schedule=bfs" | FileCheck %s --check-prefix=BFSONE
// BFSONE-LABEL: pmesh.rank_program attributes {pp_rank = 1 : i64
// BFSONE: pmesh.compute {chunk = 1 : i64, microbatch = 0 : i64, phase = "B"}
// BFSONE-NOT: reduce_scatter_grads
// BFSONE: pmesh.compute {chunk = 1 : i64, microbatch = 1 : i64, phase = "B"}
// BFSONE-NEXT: pmesh.send
// BFSONE-NEXT: pmesh.reduce_scatter_grads {accumulate = true, async = true, params = [@w2, @wte]}
// BFSONE-NOT: reduce_scatter_grads
// BFSONE: pmesh.optimizer_step
//
// Zero Bubble: each backward split into B (sends the input gradient) and W.
// ZB-LABEL: pmesh.rank_program attributes {pp_rank = 1 : i64, schedule = "zb-h1"
// ZB: pmesh.compute {chunk = 1 : i64, microbatch = 0 : i64, phase = "B"}
// ZB-NEXT: pmesh.send {channel = 1 : i64, microbatch = 0 : i64, peer = 0 : i64, tag = 2 : i64}
// ZB: pmesh.compute {chunk = 1 : i64, microbatch = 0 : i64, phase = "W"}
// ZB-NOT: reduce_scatter_grads
// ZB: pmesh.optimizer_step
//
// Errors name the pass and what is wrong.
// RUN: not pipemesh-opt %S/Inputs/staged-2-chunks.mlir --pmesh-schedule="pp=2 microbatches=2 schedule=zb" 2>&1 | FileCheck %s --check-prefix=BADSCHED
// BADSCHED: error: --pmesh-schedule: schedule must be gpipe, 1f1b, interleaved, elastic, bfs, zb-h1 or zb-h2, got 'zb'
// RUN: not pipemesh-opt %S/Inputs/staged-2-chunks.mlir --pmesh-shard="pp=2 dp=2 zero=1,3,3" 2>&1 | FileCheck %s --check-prefix=BADZERO
// BADZERO: error: --pmesh-shard: zero lists 3 levels but pp * vpp = 2 chunks
// RUN: echo 'module {}' | not pipemesh-opt --pmesh-schedule="pp=2" 2>&1 | FileCheck %s --check-prefix=NOTRAIN
// NOTRAIN: error: --pmesh-schedule needs @train_step: run --pmesh-autodiff first
