//===- PMeshParallelOps.td - per-rank programs ------------------*- tablegen -*-===//
//
// What --pmesh-shard and --pmesh-schedule put into the IR: the program of
// every pipeline rank (`pmesh.rank_program`), a flat list of what the rank
// does in one step and in which order. Compute actions name a chunk's phase
// on a micro-batch (the ops themselves stay in @train_step, tagged with
// `pmesh.stage`); point-to-point transfers name the channel (the activation
// or gradient crossing ranks, numbered in @train_step's program order, see
// lib/Plan/StagedStep.h) and the micro-batch; the data-parallel collectives
// name the parameters whose gradients or values they move. The plan emitter
// lowers these programs instruction by instruction. Included from
// PMeshOps.td.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEMESH_DIALECT_PMESH_PARALLEL_OPS_TD
#define PIPEMESH_DIALECT_PMESH_PARALLEL_OPS_TD

def PMesh_RankProgramOp : PMesh_Op<"rank_program", [NoTerminator, SingleBlock,
                                                     IsolatedFromAbove]> {
  let summary = "one pipeline rank's step (its dp replicas run the same program)";
  let arguments = (ins I64Attr:$pp_rank, StrAttr:$schedule, I64Attr:$wait_lag);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "attr-dict-with-keyword $body";
}

class PMesh_ProgramOp<string mnemonic, list<Trait> traits = []>
    : PMesh_Op<mnemonic, !listconcat(traits, [HasParent<"RankProgramOp">])> {
  let assemblyFormat = "attr-dict";
}

def PMesh_ZeroGradsOp : PMesh_ProgramOp<"zero_grads"> {
  let summary = "zeroes the rank's persistent gradients at the start of the step";
}

def PMesh_ComputeOp : PMesh_ProgramOp<"compute"> {
  let summary = "runs one phase of a chunk on a micro-batch";
  let description = [{
    `phase` is "F" (forward), "B" (the whole backward, or its input-gradient
    part when the schedule splits it) or "W" (the weight-gradient part).
    A W with `part` runs only that part of the chunk's weight gradients (one
    gradient bucket's share, in the order the W completes the buckets).

    The sends and async data-parallel reductions that follow an action are
    lowered inside it, right after the op that computes their value (the
    send's activation, the last of the reduction's gradients), so the
    reduction of one layer's gradients runs while the next layers compute
    their backward (DDP's bucketed overlap, StagedStep::gradientBuckets).
  }];
  let arguments = (ins I64Attr:$chunk, I64Attr:$microbatch, StrAttr:$phase,
                       OptionalAttr<I64Attr>:$part);
  let hasVerifier = 1;
}

def PMesh_SendOp : PMesh_ProgramOp<"send"> {
  let summary = "non-blocking send of a channel's value for one micro-batch";
  let arguments = (ins I64Attr:$channel, I64Attr:$microbatch, I64Attr:$peer, I64Attr:$tag);
}

def PMesh_RecvOp : PMesh_ProgramOp<"recv"> {
  let summary = "receive of a channel's value for one micro-batch (blocks)";
  let arguments = (ins I64Attr:$channel, I64Attr:$microbatch, I64Attr:$peer, I64Attr:$tag);
}

def PMesh_WaitSendsOp : PMesh_ProgramOp<"wait_sends"> {
  let summary = "completes every earlier send but the `keep` most recent";
  let arguments = (ins DefaultValuedAttr<I64Attr, "0">:$keep);
}

def PMesh_AllReduceGradsOp : PMesh_ProgramOp<"all_reduce_grads"> {
  let summary = "sums the listed gradients over a group (dp or tied)";
  let arguments = (ins FlatSymbolRefArrayAttr:$params, StrAttr:$group,
                       DefaultValuedAttr<BoolAttr, "false">:$async);
}

def PMesh_ReduceScatterGradsOp : PMesh_ProgramOp<"reduce_scatter_grads"> {
  let summary = "sums the listed gradients over dp, each replica keeping its shard";
  let description = [{
    With `accumulate`, the reduced shard is added to the persistent gradient
    shard and the whole gradient is freed: ZeRO-2/3 reduce the gradients of
    every run of backwards of one chunk this way (one action in depth-first
    orders, as DeepSpeed does per micro-batch; one group of micro-batches in
    breadth-first ones), so a whole gradient lives for one run only.
  }];
  let arguments = (ins FlatSymbolRefArrayAttr:$params,
                       DefaultValuedAttr<BoolAttr, "false">:$async,
                       DefaultValuedAttr<BoolAttr, "false">:$accumulate);
}

def PMesh_WaitCollectivesOp : PMesh_ProgramOp<"wait_collectives"> {
  let summary = "completes every async collective issued so far but the `keep` most recent";
  let description = [{
    A rank's collectives run one at a time in issue order, so completing all
    but the `keep` most recent is completing one of them. The ones issued so
    far include those the previous step left running (an async
    `all_gather_params` at the end of the program): a wait at the start of
    the program that names them lets the next step's first chunks compute
    while the later chunks' parameters are still being gathered.

    With `params`, the wait is what makes those parameters readable: it is
    lowered inside the compute action that follows, right before the first
    op that reads one of them (one wait per layer, so a chunk's first layer
    computes while its next layers are still being gathered).
  }];
  let arguments = (ins DefaultValuedAttr<I64Attr, "0">:$keep,
                       OptionalAttr<FlatSymbolRefArrayAttr>:$params);
}

def PMesh_OptimizerStepOp : PMesh_ProgramOp<"optimizer_step"> {
  let summary = "@optimizer_step on the rank's parameters (on the local shard when sharded)";
}

def PMesh_AllGatherParamsOp : PMesh_ProgramOp<"all_gather_params"> {
  let summary = "gathers the listed parameters' updated shards into the whole parameters";
  let description = [{
    With `async`, issued at the end of a step and completed in the next one
    by the `wait_collectives` before the first action that reads the
    parameters (Megatron's overlapped parameter gather); whoever reads the
    parameters between steps (export, checkpoint) completes it first.
  }];
  let arguments = (ins FlatSymbolRefArrayAttr:$params,
                       DefaultValuedAttr<BoolAttr, "false">:$async);
}

#endif // PIPEMESH_DIALECT_PMESH_PARALLEL_OPS_TD
