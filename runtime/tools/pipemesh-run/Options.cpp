//===- Options.cpp - pipemesh-run's command line ----------------------------===//
#include "Options.h"

#include "pipemesh/runtime/Error.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>

namespace pipemesh::run {

using rt::fail;

const char *usage() {
  return R"(usage: pipemesh-run NAME.plan --steps N [options]
       mpirun -np WORLD pipemesh-run NAME.plan --steps N [options]

Trains the plan pipemesh-opt compiled. One process per rank of the plan.

data
  --data FILE|'PATTERN'    llm.c token shard (1024-byte header, uint16 or uint32
                           tokens), or a glob of several ('train_*.bin', name order);
                           without it: the embedded default corpus (byte-level text)
  --shuffle SEED           permute the sequence windows, anew each epoch (splitmix64)
  --val-data FILE|'PATTERN'  validation shard(s): their mean loss is evaluated after
                           the last step (and every --eval-interval steps) with the
                           plan's forward, the parameters unchanged (cpu backend)
  --eval-interval N        evaluate after every N steps too (default 0: at the end)
  --eval-iters K           global batches per evaluation, sampled like steps 0..K-1
                           of the validation data (default: every window once, at
                           most 20 batches)
  --seed S                 seed of the runtime RNG (saved in checkpoints; default 0)
optimizer (AdamW, PyTorch semantics and defaults)
  --lr X (1e-3)  --beta1 X (0.9)  --beta2 X (0.999)  --eps X (1e-8)  --weight-decay X (0.01)
  --grad-clip X            global-norm clipping threshold (0 = off, the default)
  --nan-check on|off       a non-finite gradient norm or loss stops the run, before
                           the update where it can (default on)
  --warmup-steps N         linear warmup: lr*(s+1)/N for steps s < N (default 0)
  --lr-schedule constant|cosine|linear|wsd   after warmup (default constant);
                           cosine and linear decay to --min-lr over the rest, wsd
                           (warmup-stable-decay) holds --lr, then decays linearly
                           to --min-lr over the last --decay-steps
  --min-lr X               floor of the decaying schedules (default 0)
  --decay-steps N          wsd: the steps that decay
run
  --steps N                total number of steps (also what the schedule spans)
  --log-json FILE          one JSON object per step (rank 0; --resume keeps the
                           earlier steps' lines and appends)
  --checkpoint-dir D       write D/step-<s>/ checkpoints (atomic, checksummed)
  --checkpoint-every K     every K steps (and after the last step)
  --keep-checkpoints K     remove all but the K newest (default: keep every one)
  --resume                 continue from the newest checkpoint in --checkpoint-dir
                           (another plan of the same model: resharded)
  --stop-at-step S         stop after S completed steps, as if interrupted
  --max-minutes M          stop after the first step that ends M minutes into the run,
                           with a checkpoint (so does SIGUSR1 to any rank, e.g. Slurm's
                           --signal=USR1@120); --resume continues
  --export-onnx OUT.onnx   write the trained weights into a copy of the source model
  --onnx-source PATH       the source model, when the plan's model.source moved
  --backend cpu|cuda       compute backend (default cpu; cuda where the build has it:
                           one GPU per node-local rank; docs/cuda-backend.md;
                           --version lists the backends this installation has)
  --precision fp32|bf16    cuda: matmul operands in fp32 (default) or bf16
  --deterministic on|off   cuda: bit-identical runs (default on)
  --comm-timeout SEC       a peer silent this long fails the job (default 300)
  --ranks-per-node N       nodes of N consecutive ranks for a plan compiled with
                           dp-collectives=hierarchical (default: ranks sharing memory)
  --peak-tflops X          one rank's peak TFLOP/s (its device's, at the precision it
                           computes in): the step log adds the model FLOPs
                           utilization (MFU) to the TFLOP/s per rank it reports
debugging
  --profile                time per op name on rank 0, printed at the end
  --dump-data FILE         JSON lines of every micro-batch loaded (per rank)
  --write-default-corpus FILE   write the embedded corpus as a token shard and exit
  --check-rank R           read the plan as rank R does at start-up (its program,
                           derived if the plan elides replicas; the cross-rank
                           checks), print a summary and exit; no MPI, no --steps
  --help, --version
)";
}

static double parseDouble(const std::string &opt, const std::string &v) {
  char *end = nullptr;
  errno = 0;
  double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end || errno || !std::isfinite(d))
    fail(opt, " expects a number, got '", v, "'");
  return d;
}

static int64_t parseInt(const std::string &opt, const std::string &v, int64_t min) {
  char *end = nullptr;
  errno = 0;
  long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || errno)
    fail(opt, " expects an integer, got '", v, "'");
  if (n < min)
    fail(opt, " must be at least ", min, ", got ", n);
  return n;
}

static uint64_t parseU64(const std::string &opt, const std::string &v) {
  char *end = nullptr;
  errno = 0;
  unsigned long long n = std::strtoull(v.c_str(), &end, 0);
  if (v.empty() || *end || errno || v[0] == '-')
    fail(opt, " expects a non-negative integer, got '", v, "'");
  return n;
}

CommandLine parseCommandLine(int argc, char **argv) {
  CommandLine c;
  rt::RunOptions &r = c.run;
  bool haveSteps = false;
  using Handler = std::function<void(const std::string &, const std::string &)>;
  std::map<std::string, Handler> valued = {
      {"--data", [&](auto &, auto &v) { r.dataPath = v; }},
      {"--val-data", [&](auto &, auto &v) { r.valDataPath = v; }},
      {"--eval-interval", [&](auto &o, auto &v) { r.evalInterval = parseInt(o, v, 0); }},
      {"--eval-iters", [&](auto &o, auto &v) { r.evalIters = parseInt(o, v, 1); }},
      {"--steps",
       [&](auto &o, auto &v) {
         r.steps = parseInt(o, v, 1);
         haveSteps = true;
       }},
      {"--log-json", [&](auto &, auto &v) { r.logJson = v; }},
      {"--lr", [&](auto &o, auto &v) { r.opt.lr = parseDouble(o, v); }},
      {"--beta1", [&](auto &o, auto &v) { r.opt.beta1 = parseDouble(o, v); }},
      {"--beta2", [&](auto &o, auto &v) { r.opt.beta2 = parseDouble(o, v); }},
      {"--eps", [&](auto &o, auto &v) { r.opt.eps = parseDouble(o, v); }},
      {"--weight-decay", [&](auto &o, auto &v) { r.opt.weightDecay = parseDouble(o, v); }},
      {"--grad-clip", [&](auto &o, auto &v) { r.opt.gradClip = parseDouble(o, v); }},
      {"--nan-check",
       [&](auto &o, auto &v) {
         if (v != "on" && v != "off")
           fail(o, " must be on or off, got '", v, "'");
         r.opt.nanCheck = v == "on";
       }},
      {"--warmup-steps", [&](auto &o, auto &v) { r.warmupSteps = parseInt(o, v, 0); }},
      {"--lr-schedule",
       [&](auto &o, auto &v) {
         auto k = rt::parseLrSchedule(v);
         if (!k)
           fail(o, " must be constant, cosine, linear or wsd, got '", v, "'");
         r.schedule = *k;
       }},
      {"--min-lr", [&](auto &o, auto &v) { r.minLr = parseDouble(o, v); }},
      {"--decay-steps", [&](auto &o, auto &v) { r.decaySteps = parseInt(o, v, 1); }},
      {"--checkpoint-dir", [&](auto &, auto &v) { r.checkpointDir = v; }},
      {"--checkpoint-every", [&](auto &o, auto &v) { r.checkpointEvery = parseInt(o, v, 0); }},
      {"--keep-checkpoints", [&](auto &o, auto &v) { r.keepCheckpoints = parseInt(o, v, 1); }},
      {"--export-onnx", [&](auto &, auto &v) { c.exportOnnx = v; }},
      {"--onnx-source", [&](auto &, auto &v) { c.onnxSource = v; }},
      {"--backend", [&](auto &, auto &v) { r.backend = v; }},
      {"--precision",
       [&](auto &o, auto &v) {
         if (v != "fp32" && v != "bf16")
           fail(o, " must be fp32 or bf16, got '", v, "'");
         r.precision = v;
       }},
      {"--deterministic",
       [&](auto &o, auto &v) {
         if (v != "on" && v != "off")
           fail(o, " must be on or off, got '", v, "'");
         r.deterministic = v == "on";
       }},
      {"--shuffle", [&](auto &o, auto &v) { r.shuffleSeed = parseU64(o, v); }},
      {"--seed", [&](auto &o, auto &v) { r.seed = parseU64(o, v); }},
      {"--stop-at-step", [&](auto &o, auto &v) { r.stopAtStep = parseInt(o, v, 0); }},
      {"--max-minutes",
       [&](auto &o, auto &v) {
         r.maxMinutes = parseDouble(o, v);
         if (*r.maxMinutes < 0)
           fail(o, " must not be negative");
       }},
      {"--peak-tflops",
       [&](auto &o, auto &v) {
         r.peakTflops = parseDouble(o, v);
         if (*r.peakTflops <= 0)
           fail(o, " must be positive");
       }},
      {"--comm-timeout",
       [&](auto &o, auto &v) {
         c.commTimeout = parseDouble(o, v);
         if (c.commTimeout <= 0)
           fail(o, " must be positive");
       }},
      {"--ranks-per-node", [&](auto &o, auto &v) { c.ranksPerNode = parseInt(o, v, 1); }},
      {"--dump-data", [&](auto &, auto &v) { r.dumpData = v; }},
      {"--write-default-corpus", [&](auto &, auto &v) { c.writeDefaultCorpus = v; }},
      {"--check-rank", [&](auto &o, auto &v) { c.checkRank = parseInt(o, v, 0); }},
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      c.help = true;
      continue;
    }
    if (a == "--version") {
      c.version = true;
      continue;
    }
    if (a == "--profile") {
      r.profile = true;
      continue;
    }
    if (a == "--resume") {
      r.resume = true;
      continue;
    }
    if (a.rfind("--", 0) == 0) {
      std::string name = a, value;
      bool inlineValue = false;
      if (size_t eq = a.find('='); eq != std::string::npos) {
        name = a.substr(0, eq);
        value = a.substr(eq + 1);
        inlineValue = true;
      }
      auto it = valued.find(name);
      if (it == valued.end())
        fail("unknown option '", name, "' (see --help)");
      if (!inlineValue) {
        if (i + 1 >= argc)
          fail(name, " needs a value");
        value = argv[++i];
      }
      it->second(name, value);
      continue;
    }
    if (!r.planPath.empty())
      fail("unexpected argument '", a, "' (one plan file only)");
    r.planPath = a;
  }
  if (c.help || c.version || !c.writeDefaultCorpus.empty())
    return c;
  if (r.planPath.empty())
    fail("no plan file given (see --help)");
  if (c.checkRank)
    return c;
  if (!haveSteps)
    fail("--steps N is required");
  if (r.resume && r.checkpointDir.empty())
    fail("--resume needs --checkpoint-dir");
  if (r.decaySteps > 0 && r.schedule != rt::LrScheduleKind::Wsd)
    fail("--decay-steps needs --lr-schedule wsd");
  if (r.schedule == rt::LrScheduleKind::Wsd &&
      (r.decaySteps <= 0 || r.decaySteps > r.steps - r.warmupSteps))
    fail("--lr-schedule wsd needs --decay-steps between 1 and --steps minus --warmup-steps (",
         r.steps - r.warmupSteps, "), got ", r.decaySteps);
  if ((r.evalInterval > 0 || r.evalIters > 0) && !r.valDataPath)
    fail(r.evalInterval > 0 ? "--eval-interval" : "--eval-iters", " needs --val-data");
  // Backend combinations the command line alone rules out (exit 2, before
  // any plugin is loaded or plan read).
  if (r.backend == "cpu" && r.precision != "fp32")
    fail("--precision ", r.precision, " needs a device backend (--backend cuda)");
  // Evaluation skips instructions of the step; a device backend's streams and
  // events have not been checked to allow that.
  if (r.valDataPath && r.backend != "cpu")
    fail("--val-data: evaluation runs on the cpu backend only (this run uses --backend ",
         r.backend, ")");
  if (r.keepCheckpoints > 0 && r.checkpointDir.empty())
    fail("--keep-checkpoints needs --checkpoint-dir");
  if (r.checkpointEvery > 0 && r.checkpointDir.empty())
    fail("--checkpoint-every needs --checkpoint-dir");
  if (r.opt.lr < 0 || r.minLr < 0 || r.opt.eps < 0 || r.opt.weightDecay < 0 || r.opt.gradClip < 0)
    fail("learning rates, eps, weight decay and grad clip must not be negative");
  if (r.opt.beta1 < 0 || r.opt.beta1 >= 1 || r.opt.beta2 < 0 || r.opt.beta2 >= 1)
    fail("--beta1 and --beta2 must lie in [0, 1)");
  return c;
}

} // namespace pipemesh::run
