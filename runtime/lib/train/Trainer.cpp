//===- Trainer.cpp - one pipemesh-run training job ---------------------------===//
#include "pipemesh/runtime/Trainer.h"

#include "pipemesh/runtime/Activity.h"
#include "pipemesh/runtime/Checkpoint.h"
#include "pipemesh/runtime/Checksum.h"
#include "pipemesh/runtime/Communicator.h"
#include "pipemesh/runtime/Error.h"
#include "pipemesh/runtime/Evaluation.h"
#include "pipemesh/runtime/SplitMix64.h"
#include "pipemesh/runtime/StopSignal.h"
#include "pipemesh/runtime/StepLog.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <unordered_map>

namespace pipemesh::rt {

Trainer::Trainer(const RunOptions &o, Communicator &comm, std::ostream &log)
    : opts(o), comm(comm), log(log) {
  // The listed programs and this rank's own: an elided plan's other
  // replicas are not derived here (their cost grows with the world size).
  planData = readPlan(o.planPath, comm.rank());
  const Plan &p = planData;
  if (p.parallel.worldSize != comm.size())
    throw UniformError(concat("plan '", p.path, "' is compiled for world size ",
                              p.parallel.worldSize, " (pp=", p.parallel.pp, " dp=", p.parallel.dp,
                              ") but this job has ", comm.size(),
                              comm.size() == 1 ? " process" : " processes",
                              ": run it with mpirun -np ", p.parallel.worldSize));
  // Layout, groups and the pairing of transfers: every rank reaches the same
  // verdict, before any communication.
  validateParallelPlan(p);
  rankPlan = &p.rank(comm.rank());
  const BackendFactory *factory = nullptr;
  if (o.backend != "cpu")
    factory = &loadBackend(o.backend);
  if (o.steps <= 0)
    fail("--steps must be positive (got ", o.steps, ")");

  data = o.dataPath ? TokenData::load(*o.dataPath, p.model.vocab)
                    : TokenData::defaultCorpus(p.model.vocab);
  sampler = std::make_unique<Sampler>(data, p.model.seq, p.model.batch, p.parallel.dp,
                                      p.parallel.microbatches, o.shuffleSeed);

  if (o.valDataPath) {
    valData = TokenData::load(*o.valDataPath, p.model.vocab, "--val-data");
    valSampler = std::make_unique<Sampler>(valData, p.model.seq, p.model.batch, p.parallel.dp,
                                           p.parallel.microbatches, std::nullopt);
    evalIters = o.evalIters > 0
                    ? o.evalIters
                    : std::clamp<int64_t>(valSampler->numWindows() / p.globalBatch(), 1,
                                          kDefaultEvalIters);
    evalSkips = evaluationSkips(p, *rankPlan);
  }

  arena = std::make_unique<Arena>(*rankPlan);
  arena->loadInitialValues(p);

  // The dp and tied sub-communicators (collective, bounded), then the program
  // is bound against them and the point-to-point peers are warmed up.
  activity::set("start-up (creating the communicators)");
  comm.setupGroups(rankPlan->dpGroup, rankPlan->tiedGroup, p.parallel.hierarchicalDp);
  if (p.parallel.hierarchicalDp) {
    // Each dp group finds its own nodes: the banner counts the ranks whose
    // collectives run within and between them.
    auto [nodes, perNode] = comm.dpHierarchy();
    double on = nodes > 1 && perNode > 1 ? 1 : 0;
    comm.allreduceSum(&on, 1, "count of ranks with hierarchical dp collectives");
    hierarchicalRanks = (int64_t)on;
  }
  if (factory) {
    activity::set("start-up (the compute backend)");
    BackendOptions bo;
    bo.precision = o.precision;
    bo.deterministic = o.deterministic;
    bo.profile = o.profile;
    bo.commTimeoutSeconds = comm.timeoutSeconds;
    backend = (*factory)(p, *rankPlan, *arena, comm, bo);
  }
  env = std::make_unique<ExecEnv>(p, *rankPlan, backend ? backend->arena() : *arena);
  env->backend = backend.get();
  env->sampler = sampler.get();
  env->comm = &comm;
  env->opt = o.opt;
  executor = std::make_unique<Executor>(*env);
  activity::set("start-up (warming up the point-to-point connections)");
  comm.warmUpPeers(executor->peers());
  if (backend)
    backend->prepare(*env);
  if (const char *t = std::getenv("PIPEMESH_TEST_EXIT_AT_STEP"))
    setUpTestExit(t);

  schedule.lr = o.opt.lr;
  schedule.warmupSteps = o.warmupSteps;
  schedule.kind = o.schedule;
  schedule.minLr = o.minLr;
  schedule.decaySteps = o.decaySteps;
  schedule.totalSteps = o.steps;
  rngState = SplitMix64(o.seed).state;

  if (o.resume) {
    if (o.checkpointDir.empty())
      fail("--resume needs --checkpoint-dir");
    activity::set("start-up (loading the checkpoint)");
    CheckpointState st = loadCheckpoint(o.checkpointDir, p, *rankPlan, *arena, comm, resumedFrom);
    startStep = st.step;
    rngState = st.rngState;
    reshardedFrom = st.reshardedFrom;
    if (comm.rank() == 0) {
      auto differs = [&](const char *key, const nlohmann::json &now) {
        if (st.run.contains(key) && st.run[key] != now)
          log << "pipemesh-run: warning: the checkpoint was written with " << key << " = "
              << st.run[key].dump() << ", this run uses " << now.dump()
              << ": the trajectory will differ from an uninterrupted run\n";
      };
      // The flags that move the trajectory (the learning rate and the data).
      const nlohmann::json now = runRecord();
      for (const char *key : {"steps", "shuffle", "data", "lr", "lr_schedule", "warmup_steps",
                              "min_lr", "decay_steps"})
        differs(key, now[key]);
      // Checkpoints from before epochs were reshuffled read every epoch
      // through the first one's permutation.
      if (opts.shuffleSeed && st.run.contains("shuffle") && !st.run["shuffle"].is_null() &&
          !st.run.contains("shuffle_each_epoch"))
        log << "pipemesh-run: warning: the checkpoint was written by a pipemesh-run that read "
               "every epoch in the order of the first; this one reshuffles each epoch: from "
               "the second epoch on, the trajectory will differ from the run that wrote it\n";
    }
  }
  // The device starts from the host arena: initial values or the checkpoint.
  if (backend)
    backend->upload(*arena);
  banner();
}

Trainer::~Trainer() = default;

void Trainer::setUpTestExit(const std::string &spec) {
  // PIPEMESH_TEST_EXIT_AT_STEP=RANK:STEP[:INSTRUCTION] (tests only): that
  // rank _exit(9)s in the step after STEP completed steps (like
  // --stop-at-step; the progress line "step STEP+1/N"), before instruction
  // INSTRUCTION (default: half-way through its program), as if killed.
  long long r = -1, s = -1, i = -1;
  int n = std::sscanf(spec.c_str(), "%lld:%lld:%lld", &r, &s, &i);
  if (n < 2 || r < 0 || s < 0)
    fail("PIPEMESH_TEST_EXIT_AT_STEP must be RANK:STEP[:INSTRUCTION], got '", spec, "'");
  if (r != comm.rank())
    return;
  env->testExitStep = s;
  env->testExitInstruction = n == 3 && i >= 0 ? (size_t)i : rankPlan->program.size() / 2;
}

void Trainer::banner() {
  if (comm.rank() != 0)
    return;
  const Plan &p = planData;
  log << "pipemesh-run: plan " << p.path << " (" << p.params.size() << " parameters, "
      << p.model.numParams << " values; batch " << p.model.batch << " x seq " << p.model.seq << ", "
      << p.parallel.microbatches
      << (p.parallel.microbatches == 1 ? " micro-batch" : " micro-batches") << ", pp "
      << p.parallel.pp << " dp " << p.parallel.dp;
  if (p.parallel.vpp > 1)
    log << " vpp " << p.parallel.vpp;
  if (p.parallel.dp > 1)
    log << " zero " << p.parallel.zero;
  if (!p.parallel.schedule.empty())
    log << ", schedule " << p.parallel.schedule;
  if (p.model.activations != "f32")
    log << ", activations stored as " << p.model.activations;
  if (p.model.paramDtype != "f32")
    log << ", parameters computed in " << p.model.paramDtype << " (f32 master weights)";
  if (p.model.gradReduce != "f32" && p.parallel.dp > 1)
    log << ", gradients summed over dp in " << p.model.gradReduce;
  log << ")\n";
  log << "pipemesh-run: " << comm.size() << (comm.size() == 1 ? " rank" : " ranks") << " via "
      << comm.name() << "; rank 0 arena " << rankPlan->arenaBytes << " bytes";
  if (executor->stagingBytes())
    log << " (+ " << executor->stagingBytes() << " bytes of f32 staging for its bf16 buffers)";
  log << "; backend "
      << (backend ? backend->name() : std::string("cpu"));
  if (comm.size() > 1)
    log << "; --comm-timeout " << comm.timeoutSeconds << " s";
  if (p.parallel.hierarchicalDp) {
    auto [nodes, perNode] = comm.dpHierarchy();
    if (nodes > 1 && perNode > 1)
      log << "; dp collectives hierarchical (" << nodes << " nodes x " << perNode
          << " ranks per dp group)";
    else
      log << "; dp collectives flat (rank 0's dp group has " << perNode << " rank"
          << (perNode == 1 ? "" : "s") << " on each of " << nodes
          << (nodes == 1 ? " node" : " nodes") << ")";
    if (hierarchicalRanks > 0 && hierarchicalRanks < comm.size())
      log << "; hierarchical on " << hierarchicalRanks << " of the " << comm.size() << " ranks";
  }
  if (!backend && !opts.blasInfo.empty())
    log << " (" << opts.blasInfo << ")";
  log << "\n";
  if (backend)
    log << "pipemesh-run: " << backend->memoryReport() << "\n";
  log << "pipemesh-run: data " << data->origin() << " (" << data->size() << " tokens, "
      << sampler->numWindows() << " windows of " << p.model.seq << ")"
      << (opts.shuffleSeed ? ", shuffled with seed " + std::to_string(*opts.shuffleSeed) +
                                    " (a new order each epoch)"
                              : "")
      << "\n";
  if (valSampler)
    log << "pipemesh-run: validation data " << valData->origin() << " (" << valData->size()
        << " tokens, " << valSampler->numWindows() << " windows): " << evalIters
        << (evalIters == 1 ? " batch" : " batches") << " per evaluation, "
        << (opts.evalInterval > 0 ? "every " + std::to_string(opts.evalInterval) + " steps and "
                                  : std::string())
        << "after the last step\n";
  if (!resumedFrom.empty())
    log << "pipemesh-run: resumed from " << resumedFrom << " at step " << startStep
        << (reshardedFrom.empty() ? std::string()
                                  : " (another plan's checkpoint, " + reshardedFrom + ": resharded)")
        << "\n";
  log.flush();
}

void Trainer::run() {
  const Plan &p = planData;
  std::unique_ptr<JsonLog> jsonLog;
  if (comm.rank() == 0 && !opts.logJson.empty())
    jsonLog = std::make_unique<JsonLog>(opts.logJson, resumedFrom.empty() ? -1 : startStep);
  std::unique_ptr<std::ofstream> dump;
  if (!opts.dumpData.empty()) {
    std::string path = opts.dumpData;
    if (comm.size() > 1)
      path += ".rank-" + std::to_string(comm.rank());
    dump = std::make_unique<std::ofstream>(path);
    if (!*dump)
      fail("cannot open --dump-data file '", path, "'");
    std::ofstream *out = dump.get();
    env->observer = [out](int64_t step, int64_t mb, int64_t dpRank, const int64_t *tok,
                          const int64_t *tgt, int64_t n) {
      nlohmann::json j = {{"step", step},
                          {"microbatch", mb},
                          {"dp_rank", dpRank},
                          {"tokens", std::vector<int64_t>(tok, tok + n)},
                          {"targets", std::vector<int64_t>(tgt, tgt + n)}};
      *out << j.dump() << "\n";
    };
  }
  if (startStep >= opts.steps && comm.rank() == 0)
    log << "pipemesh-run: nothing to do: the checkpoint is at step " << startStep
        << " and --steps is " << opts.steps << "\n";

  const double tokensPerStep = (double)p.globalBatch() * (double)p.model.seq;
  using clock = std::chrono::steady_clock;
  const auto runStart = clock::now();
  installStopSignalHandler();
  for (int64_t s = startStep; s < opts.steps; ++s) {
    if (opts.stopAtStep && s >= *opts.stopAtStep) {
      if (comm.rank() == 0)
        log << "pipemesh-run: stopping after step " << s << " (--stop-at-step)\n";
      break;
    }
    StepState &st = env->state;
    st = StepState();
    st.step = s;
    st.lr = schedule.at(s);
    auto t0 = clock::now();
    executor->runStep();
    const bool another = s + 1 < opts.steps && !(opts.stopAtStep && s + 1 >= *opts.stopAtStep);
    if (s == startStep && another) {
      executor->resetProfile();
      if (backend)
        backend->resetProfile();
      profileFirst = s + 1;
    } else if (profileFirst < 0) {
      profileFirst = s;
    }
    profileLast = s;
    // The loss, and the requests to stop after this step (every rank learns
    // them from the same all-reduce, so all stop after the same step):
    // SIGUSR1 on any rank, --max-minutes on rank 0's clock.
    double reduced[3] = {st.loss, stopSignalReceived() ? 1.0 : 0.0, 0.0};
    if (comm.rank() == 0 && opts.maxMinutes &&
        std::chrono::duration<double>(clock::now() - runStart).count() >= 60.0 * *opts.maxMinutes)
      reduced[2] = 1.0;
    activity::set("the step-end all-reduce of the loss (waiting for the other ranks)");
    comm.allreduceSum(reduced, 3, "step loss");
    double loss = reduced[0];
    const bool stopOnSignal = reduced[1] > 0, stopOnTime = reduced[2] > 0;
    // What the CPU adamw catches before its update, a device backend's
    // reports after it (the last checkpoint holds finite values either way).
    if (opts.opt.nanCheck && (!std::isfinite(loss) || (st.optimizerRan && !std::isfinite(st.gradNorm))))
      throw UniformError(concat("step ", s + 1, ": the loss is ", loss, " and the gradient norm ",
                                st.gradNorm, " (--nan-check off would continue)"));
    activity::setStep(-1);
    // This rank's step: compute (kernels and control instructions), comm
    // (communication instructions and waits inside others), idle (the rest
    // of the step's wall time up to the step-end all-reduce every rank
    // shares: waiting for the slowest rank, bookkeeping).
    double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    const StepTimings &t = executor->timings();
    double compute = t.computeMs + t.controlMs;
    double mine[3] = {compute, t.commMs, std::max(0.0, ms - compute - t.commMs)};
    activity::set("the gather of the per-rank timings");
    std::vector<double> all = comm.gather(mine, 3, "per-rank timings");
    if (comm.rank() == 0) {
      StepRecord r;
      r.step = s;
      r.steps = opts.steps;
      r.loss = loss;
      r.lr = st.lr;
      r.gradNorm = st.gradNorm;
      r.hasGradNorm = st.optimizerRan;
      r.ms = ms;
      r.tokensPerS = ms > 0 ? tokensPerStep / (ms / 1000.0) : 0;
      if (ms > 0 && p.model.flopsPerStep > 0) {
        r.tflopsPerRank = p.model.flopsPerStep / (ms / 1000.0) / comm.size() / 1e12;
        if (opts.peakTflops)
          r.mfu = r.tflopsPerRank / *opts.peakTflops;
      }
      for (int k = 0; k < comm.size(); ++k)
        r.ranks.push_back({all[3 * k], all[3 * k + 1], all[3 * k + 2]});
      log << progressLine(r) << "\n";
      log.flush();
      if (jsonLog)
        jsonLog->write(r);
    }
    int64_t done = s + 1;
    if (valSampler &&
        ((opts.evalInterval > 0 && done % opts.evalInterval == 0) || done == opts.steps))
      evaluate(done, jsonLog.get());
    const bool stopping = (stopOnSignal || stopOnTime) && done < opts.steps;
    bool due = !opts.checkpointDir.empty() &&
               ((opts.checkpointEvery > 0 && done % opts.checkpointEvery == 0) ||
                done == opts.steps || stopping);
    if (due)
      checkpoint(done);
    if (stopping) {
      if (comm.rank() == 0)
        log << "pipemesh-run: stopping after step " << done << ": "
            << (stopOnSignal ? "SIGUSR1 received" : "")
            << (stopOnSignal && stopOnTime ? " and " : "")
            << (stopOnTime ? "--max-minutes reached" : "")
            << (opts.checkpointDir.empty() ? " (no --checkpoint-dir: nothing saved)"
                                           : "; --resume continues from its checkpoint")
            << "\n";
      break;
    }
  }
  activity::set("the end of the run");
  syncToHost(); // trainedParams (--export-onnx) reads the host arena
  if (opts.profile)
    printProfile();
}

nlohmann::json Trainer::runRecord() const {
  return {{"steps", opts.steps},
            {"data", data->origin()},
            {"shuffle", opts.shuffleSeed ? nlohmann::json(*opts.shuffleSeed) : nlohmann::json()},
            {"shuffle_each_epoch", true},
            {"lr", opts.opt.lr},
            {"lr_schedule", lrScheduleName(opts.schedule)},
            {"warmup_steps", opts.warmupSteps},
            {"min_lr", opts.minLr},
            {"decay_steps", opts.decaySteps},
            {"beta1", opts.opt.beta1},
            {"beta2", opts.opt.beta2},
            {"eps", opts.opt.eps},
            {"weight_decay", opts.opt.weightDecay},
            {"grad_clip", opts.opt.gradClip},
            {"seed", opts.seed}};
}

void Trainer::checkpoint(int64_t done) {
  CheckpointState cs;
  cs.step = done;
  cs.rngState = rngState;
  cs.run = runRecord();
  activity::set("writing a checkpoint");
  syncToHost();
  std::string where = writeCheckpoint(opts.checkpointDir, cs, planData, *rankPlan, *arena, comm);
  if (comm.rank() == 0) {
    log << "pipemesh-run: checkpoint " << where;
    if (opts.keepCheckpoints > 0)
      if (int gone = pruneCheckpoints(opts.checkpointDir, opts.keepCheckpoints))
        log << " (" << gone << " older removed, --keep-checkpoints " << opts.keepCheckpoints
            << ")";
    log << "\n";
  }
}

void Trainer::evaluate(int64_t done, JsonLog *jsonLog) {
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  // The step's program on the validation batches, without what only the
  // update needs (Evaluation.h); the data loader reads batch i as if it were
  // step i of the validation data.
  const Sampler *trainSampler = env->sampler;
  MicrobatchObserver observer = std::move(env->observer);
  env->observer = nullptr;
  env->sampler = valSampler.get();
  double sum = 0; // this rank's share of every batch's loss; summed over ranks once
  for (int64_t i = 0; i < evalIters; ++i) {
    StepState &st = env->state;
    st = StepState();
    st.step = i;
    executor->runStep(&evalSkips);
    sum += st.loss;
  }
  activity::set("the all-reduce of the validation loss (waiting for the other ranks)");
  comm.allreduceSum(&sum, 1, "validation loss");
  env->sampler = trainSampler;
  env->observer = std::move(observer);
  if (comm.rank() != 0)
    return;
  EvalRecord r;
  r.step = done - 1;
  r.steps = opts.steps;
  r.batches = evalIters;
  r.tokens = evalIters * planData.globalBatch() * planData.model.seq;
  r.valLoss = sum / (double)evalIters;
  r.ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  log << progressLine(r) << "\n";
  log.flush();
  if (jsonLog)
    jsonLog->write(r);
}

void Trainer::syncToHost() {
  if (backend)
    backend->download(*arena);
}

void Trainer::printProfile() const {
  if (comm.rank() != 0)
    return;
  if (profileLast < 0) {
    log << "pipemesh-run: --profile: no step ran\n";
    return;
  }
  auto prof = executor->profile();
  double total = 0;
  for (auto &[op, ms] : prof)
    total += ms;
  log << "pipemesh-run: time per op on rank 0 (steps " << profileFirst + 1 << "-" << profileLast + 1
      << (profileFirst > startStep ? ", the first left out: its one-time costs" : "") << "; "
      << total << " ms):\n";
  for (auto &[op, ms] : prof) {
    char line[128];
    std::snprintf(line, sizeof line, "  %-20s %10.2f ms  %5.1f%%\n", op.c_str(), ms,
                  total > 0 ? 100.0 * ms / total : 0.0);
    log << line;
  }
  if (backend)
    log << backend->profileReport();
  log << "pipemesh-run: the 25 largest by op, input shapes and attributes:\n";
  for (auto &[kind, ms] : executor->profileByShape(25)) {
    char line[64];
    std::snprintf(line, sizeof line, "  %10.2f ms  %5.1f%%  ", ms, total > 0 ? 100.0 * ms / total : 0.0);
    log << line << kind << "\n";
  }
}

std::vector<TrainedParam> Trainer::trainedParams() {
  // Every rank runs this: rank 0 collects each parameter from the rank that
  // holds it whole (the lowest), or from the ZeRO-3 shards that cover it;
  // one parameter at a time, so rank 0 holds one extra copy at the most
  // beyond what it returns. The holders come from the listed programs: in an
  // elided plan replica d of listed rank r is rank r + d and holds the same
  // buffers, its shards d shards further (Plan.h's replica rules), so the
  // lowest whole copy is a listed rank's and the shards are enumerated in
  // global rank order, as if every replica had been derived.
  std::vector<TrainedParam> out;
  exportStorage.assign(planData.params.size(), {});
  const int me = comm.rank();
  const int64_t replicas = planData.replicasPerListed();
  // Per listed program, its param buffers (whole and shards) by parameter.
  std::vector<std::unordered_map<std::string, std::vector<const BufferInfo *>>> held(
      planData.listed.size());
  for (size_t k = 0; k < planData.listed.size(); ++k)
    for (const BufferInfo &b : planData.listed[k].buffers)
      if (b.kind == BufferKind::Param)
        held[k][b.param].push_back(&b);
  for (size_t i = 0; i < planData.params.size(); ++i) {
    const ParamInfo &pi = planData.params[i];
    const int64_t n = numElements(pi.shape);
    const int tag = (int)(i % (size_t)std::max(1, comm.maxTag()));
    auto mine = [&](size_t k) -> const std::vector<const BufferInfo *> & {
      static const std::vector<const BufferInfo *> none;
      auto it = held[k].find(pi.name);
      return it == held[k].end() ? none : it->second;
    };
    struct Piece {
      int64_t rank, buffer; ///< the holder and its buffer's id
      int64_t offset, count;
    };
    std::vector<Piece> pieces;
    // The whole copy on the lowest rank (its last such buffer), else the shards.
    for (size_t k = 0; k < planData.listed.size() && pieces.empty(); ++k) {
      const BufferInfo *whole = nullptr;
      for (const BufferInfo *b : mine(k))
        if (!b->isShard() && b->elemOffset == 0 && b->numel == n)
          whole = b;
      if (whole)
        pieces.push_back({planData.listed[k].rank, whole->id, 0, n});
    }
    if (pieces.empty()) {
      std::vector<bool> covered(n, false);
      for (size_t k = 0; k < planData.listed.size(); ++k)
        for (int64_t d = 0; d < replicas; ++d)
          for (const BufferInfo *b : mine(k)) {
            if (!b->isShard())
              continue;
            int64_t first = replica::shardOffset(b->elemOffset, b->shardNumel, d);
            if (first >= n || covered[first])
              continue;
            int64_t count = std::min<int64_t>(b->shardNumel, n - first);
            std::fill(covered.begin() + first, covered.begin() + first + count, true);
            pieces.push_back({replica::rank(planData.listed[k].rank, d), b->id, first, count});
          }
      if (std::find(covered.begin(), covered.end(), false) != covered.end())
        fail("--export-onnx: no rank holds all of parameter '", pi.name, "'");
    }
    // A piece of this rank's is its own buffer of that id (a derived replica's
    // arena holds its own shard there).
    auto local = [&](const Piece &pc) {
      return static_cast<const float *>(arena->tensor(rankPlan->buffer(pc.buffer)).data);
    };
    if (me == 0 && pieces.size() == 1 && pieces[0].rank == 0) {
      out.push_back({&pi, local(pieces[0])});
      continue;
    }
    std::vector<std::unique_ptr<CommRequest>> requests;
    if (me == 0)
      exportStorage[i].assign(n, 0.0f);
    for (const Piece &pc : pieces) {
      std::string what = "--export-onnx: elements " + std::to_string(pc.offset) + ".." +
                         std::to_string(pc.offset + pc.count) + " of '" + pi.name + "'";
      if (pc.rank == me && me == 0)
        std::copy(local(pc), local(pc) + pc.count, exportStorage[i].begin() + pc.offset);
      else if (pc.rank == me)
        requests.push_back(comm.isend(local(pc), pc.count * sizeof(float), 0, tag, what));
      else if (me == 0)
        requests.push_back(comm.irecv(exportStorage[i].data() + pc.offset,
                                      pc.count * sizeof(float), (int)pc.rank, tag, what));
    }
    for (auto &r : requests)
      r->wait();
    if (me == 0)
      out.push_back({&pi, exportStorage[i].data()});
  }
  return out;
}

} // namespace pipemesh::rt
