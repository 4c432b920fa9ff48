//===- pipemesh-run.cpp - runs a PipeMesh training plan ---------------------===//
//
//   mpirun -np WORLD pipemesh-run NAME.plan --steps N [--data FILE] [...]
//
// Every failure is one line "pipemesh-run: error: ..." on stderr and a
// non-zero exit; with more than one rank the failing rank ends the job
// (MPI_Abort) so that no peer waits forever.
//
//===----------------------------------------------------------------------===//
#include "Options.h"

#include "pipemesh/runtime/Activity.h"
#include "pipemesh/runtime/Backend.h"
#include "pipemesh/runtime/Communicator.h"
#include "pipemesh/runtime/CpuKernels.h"
#include "pipemesh/runtime/DefaultCorpus.h"
#include "pipemesh/runtime/Error.h"
#include "pipemesh/runtime/OnnxExport.h"
#include "pipemesh/runtime/Plan.h"
#include "pipemesh/runtime/TokenData.h"
#include "pipemesh/runtime/Trainer.h"

#include <cstdio>
#include <iostream>

using namespace pipemesh;

static int reportError(const std::string &msg, rt::Communicator *comm) {
  std::cout.flush();
  rt::activity::disarm();
  // Messages from the executor already start with "rank R, instruction I".
  bool named = comm && msg.rfind("rank " + std::to_string(comm->rank()) + ",", 0) == 0;
  if (comm && comm->size() > 1 && !named)
    std::fprintf(stderr, "pipemesh-run: error: rank %d: %s\n", comm->rank(), msg.c_str());
  else
    std::fprintf(stderr, "pipemesh-run: error: %s\n", msg.c_str());
  std::fflush(stderr);
  if (comm && comm->size() > 1)
    comm->abort(1);
  rt::finalizeMpi();
  return 1;
}

/// --check-rank R: what rank R's process does with the plan before its
/// first communication (read it, derive its program, the cross-rank checks),
/// in one process and without MPI; bench/plan_load.py times it.
static int checkRank(const std::string &path, int64_t r) {
  try {
    rt::Plan plan = rt::readPlan(path, r);
    if (r >= plan.parallel.worldSize)
      rt::fail("--check-rank ", r, ": plan '", path, "' has world size ",
               plan.parallel.worldSize, " (ranks 0 to ", plan.parallel.worldSize - 1, ")");
    rt::validateParallelPlan(plan);
    const rt::RankPlan &rp = plan.rank(r);
    std::printf("pipemesh-run: plan %s: rank %lld of %lld (pp_rank %lld, dp_rank %lld): %zu "
                "instructions, %zu buffers, arena %llu bytes; %zu listed program(s)%s\n",
                path.c_str(), (long long)r, (long long)plan.parallel.worldSize,
                (long long)rp.ppRank, (long long)rp.dpRank, rp.program.size(), rp.buffers.size(),
                (unsigned long long)rp.arenaBytes, plan.listed.size(),
                plan.derived.empty() ? "" : ", this rank's derived from its dp rank 0's");
  } catch (const rt::Error &e) {
    return reportError(e.what(), nullptr);
  } catch (const std::exception &e) {
    return reportError(std::string("internal error: ") + e.what(), nullptr);
  }
  return 0;
}

int main(int argc, char **argv) {
  // First: may re-execute the program with OPENBLAS_CORETYPE set.
  std::string blas = rt::cpu::configureBlas(argc, argv);

  run::CommandLine cl;
  try {
    cl = run::parseCommandLine(argc, argv);
  } catch (const rt::Error &e) {
    std::fprintf(stderr, "pipemesh-run: error: %s\n", e.what());
    return 2;
  }
  if (cl.help) {
    std::fputs(run::usage(), stdout);
    return 0;
  }
  if (cl.version) {
    // The cpu backend's BLAS too: which OpenBLAS kernels the sums run on
    // decides their order (tests run their PyTorch references on the same).
    std::printf("pipemesh-run (PipeMesh) plan format %u; cpu %s; backends: %s\n",
                (unsigned)rt::kPlanVersion, blas.c_str(), rt::availableBackends().c_str());
    return 0;
  }
  if (!cl.writeDefaultCorpus.empty()) {
    try {
      rt::writeShard(cl.writeDefaultCorpus, rt::defaultCorpusTokens());
    } catch (const rt::Error &e) {
      std::fprintf(stderr, "pipemesh-run: error: %s\n", e.what());
      return 1;
    }
    return 0;
  }

  if (cl.checkRank)
    return checkRank(cl.run.planPath, *cl.checkRank);

  std::unique_ptr<rt::Communicator> comm = rt::createMpiCommunicator(&argc, &argv);
  comm->timeoutSeconds = cl.commTimeout;
  comm->ranksPerNode = cl.ranksPerNode;
  // When another rank dies, mpirun usually ends this one with SIGTERM before
  // any deadline here expires: say where it was (docs/pipemesh-run.md).
  if (comm->size() > 1)
    rt::activity::installTerminationHandler(comm->rank());
  cl.run.blasInfo = blas;
  try {
    rt::Trainer trainer(cl.run, *comm, std::cout);
    // The model --export-onnx copies is looked for now, not after the last
    // step: rank 0 (which exports) looks, and every rank learns its verdict.
    std::string source;
    if (!cl.exportOnnx.empty()) {
      std::string why;
      if (comm->rank() == 0) {
        try {
          source = rt::checkModelSource(cl.onnxSource, trainer.plan().model.source,
                                        trainer.plan().path);
        } catch (const rt::Error &e) {
          why = e.what();
        }
      }
      if (!comm->allOk(why.empty(), "the --export-onnx source check"))
        throw rt::UniformError(comm->rank() == 0 ? why : "--export-onnx: no source model");
    }
    trainer.run();
    if (!cl.exportOnnx.empty()) {
      std::vector<rt::TrainedParam> params = trainer.trainedParams();
      if (comm->rank() == 0) {
        std::vector<rt::ExportParam> ep;
        for (const rt::TrainedParam &p : params)
          ep.push_back(
              {p.info->name, p.info->source, p.info->shape, p.data, p.info->transposedCopies});
        rt::ExportSummary s = rt::exportOnnx(source, cl.exportOnnx, ep);
        std::cout << "pipemesh-run: exported " << ep.size() << " trained parameters to "
                  << cl.exportOnnx << " (from " << source << ": " << s.written
                  << " initializers rewritten, " << s.split << " deduplicated ones split, "
                  << s.transposed << " transposed copies"
                  << (s.externalData ? ", external data" : "") << ")\n";
      }
      comm->barrier("ONNX export");
    }
    // Every rank is done and alive before MPI_Finalize (which has no
    // deadline of its own).
    rt::activity::set("the end of the run");
    comm->barrier("the end of the run");
  } catch (const rt::UniformError &e) {
    std::cout.flush();
    if (comm->rank() == 0)
      std::fprintf(stderr, "pipemesh-run: error: %s\n", e.what());
    rt::finalizeMpi();
    return 1;
  } catch (const rt::Error &e) {
    return reportError(e.what(), comm.get());
  } catch (const std::exception &e) {
    return reportError(std::string("internal error: ") + e.what(), comm.get());
  }
  std::cout.flush();
  rt::finalizeMpi();
  return 0;
}
