//===- PerItemDiagnostics.h - diagnostics of parallel work, in order -*- C++ -*-===//
//
// Work items run in parallel (mlir::failableParallelForEachN) keep what they
// diagnose per item; the caller then reports them item by item up to the
// first failing one, as a serial loop that stopped there would have,
// whatever order the threads ran in. Unlike mlir::ParallelDiagnosticHandler,
// which reports every item's.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_LIB_PLAN_PERITEMDIAGNOSTICS_H
#define PIPEMESH_LIB_PLAN_PERITEMDIAGNOSTICS_H

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/Threading.h"

#include <mutex>
#include <vector>

namespace pipemesh::plan::detail {

class PerItemDiagnostics {
public:
  PerItemDiagnostics(mlir::MLIRContext *ctx, size_t items) : ctx(ctx), kept(items) {
    handler = ctx->getDiagEngine().registerHandler([this](mlir::Diagnostic &d) {
      std::lock_guard<std::mutex> lock(mutex);
      auto it = itemOfThread.find(llvm::get_threadid());
      if (it == itemOfThread.end())
        return mlir::failure(); // not from an item: the next handler's
      kept[it->second].push_back(std::move(d));
      return mlir::success();
    });
  }
  ~PerItemDiagnostics() { stop(); }

  /// The calling thread works on `item` until endItem().
  void beginItem(size_t item) {
    std::lock_guard<std::mutex> lock(mutex);
    itemOfThread[llvm::get_threadid()] = item;
  }
  void endItem() {
    std::lock_guard<std::mutex> lock(mutex);
    itemOfThread.erase(llvm::get_threadid());
  }
  /// Emits `item`'s diagnostics to the context's other handlers (after the
  /// parallel work).
  void report(size_t item) {
    stop();
    for (mlir::Diagnostic &d : kept[item])
      ctx->getDiagEngine().emit(std::move(d));
    kept[item].clear();
  }

private:
  void stop() {
    if (handler) {
      ctx->getDiagEngine().eraseHandler(handler);
      handler = 0;
    }
  }

  mlir::MLIRContext *ctx;
  mlir::DiagnosticEngine::HandlerID handler = 0;
  std::mutex mutex;
  llvm::DenseMap<uint64_t, size_t> itemOfThread;
  std::vector<std::vector<mlir::Diagnostic>> kept;
};

} // namespace pipemesh::plan::detail

#endif // PIPEMESH_LIB_PLAN_PERITEMDIAGNOSTICS_H
