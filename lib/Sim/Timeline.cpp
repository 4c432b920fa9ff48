//===- Timeline.cpp - traces and pictures of a simulated step -------------===//
#include "pipemesh/Sim/Timeline.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"

#include <algorithm>

using namespace pipemesh;
using namespace pipemesh::sim;

namespace {

enum Thread { ComputeThread = 0, P2PThread = 1, CollectiveThread = 2 };

std::string spanName(const Job &job, int64_t rank, const Span &s) {
  const Program &p = job.ranks[rank];
  switch (s.kind) {
  case SpanKind::Compute:
    if (s.label >= 0 && s.label < (int32_t)p.labels.size())
      return p.labels[s.label];
    return workName(s.work).str();
  case SpanKind::Bubble:
    return "bubble";
  case SpanKind::ExposedComm:
    return "exposed comm";
  case SpanKind::P2P:
    return "send to " + std::to_string(s.peer);
  case SpanKind::Collective:
    if (s.peer >= 0 && s.peer < (int32_t)job.groups.size())
      return "collective " + job.groups[s.peer].name;
    return "collective";
  }
  return "?";
}

const char *category(const Span &s) {
  switch (s.kind) {
  case SpanKind::Compute:
    return workName(s.work).data();
  case SpanKind::Bubble:
    return "bubble";
  case SpanKind::ExposedComm:
    return "exposed_comm";
  case SpanKind::P2P:
    return "p2p";
  case SpanKind::Collective:
    return "collective";
  }
  return "?";
}

const char *color(const Span &s) {
  switch (s.kind) {
  case SpanKind::Compute:
    switch (s.work) {
    case Work::Forward:
      return "#4c78a8";
    case Work::Backward:
      return "#59a14f";
    case Work::WeightGrad:
      return "#76b7b2";
    case Work::Recompute:
      return "#f28e2b";
    case Work::Optimizer:
      return "#b07aa1";
    case Work::Other:
      return "#9d9d9d";
    }
    return "#9d9d9d";
  case SpanKind::Bubble:
    return "#eeeeee";
  case SpanKind::ExposedComm:
    return "#e15759";
  default:
    return "#ffffff";
  }
}

} // namespace

void pipemesh::sim::writeChromeTrace(llvm::raw_ostream &os, const Job &job,
                                     const SimResult &res) {
  llvm::json::OStream j(os);
  j.objectBegin();
  j.attribute("displayTimeUnit", "ms");
  j.attributeBegin("traceEvents");
  j.arrayBegin();
  auto meta = [&](int64_t pid, int tid, const char *what, const std::string &name) {
    j.object([&] {
      j.attribute("ph", "M");
      j.attribute("pid", pid);
      j.attribute("tid", tid);
      j.attribute("name", what);
      j.attributeObject("args", [&] { j.attribute("name", name); });
    });
  };
  for (size_t r = 0; r < res.spans.size(); ++r) {
    meta(r, 0, "process_name", "rank " + std::to_string(r));
    meta(r, ComputeThread, "thread_name", "compute");
    meta(r, P2PThread, "thread_name", "p2p");
    meta(r, CollectiveThread, "thread_name", "dp-collective");
    for (const Span &s : res.spans[r]) {
      int tid = s.kind == SpanKind::P2P          ? P2PThread
                : s.kind == SpanKind::Collective ? CollectiveThread
                                                 : ComputeThread;
      j.object([&] {
        j.attribute("ph", "X");
        j.attribute("pid", (int64_t)r);
        j.attribute("tid", tid);
        j.attribute("name", spanName(job, r, s));
        j.attribute("cat", category(s));
        j.attribute("ts", s.start * 1e6);
        j.attribute("dur", (s.end - s.start) * 1e6);
        if (s.instr >= 0 && s.instr < (int32_t)job.ranks[r].instrs.size()) {
          int32_t src = job.ranks[r].instrs[s.instr].source;
          j.attributeObject("args", [&] { j.attribute("instruction", src >= 0 ? src : s.instr); });
        }
      });
    }
    if (r < res.memory.size())
      for (auto [t, bytes] : res.memory[r])
        j.object([&] {
          j.attribute("ph", "C");
          j.attribute("pid", (int64_t)r);
          j.attribute("name", "activation memory");
          j.attribute("ts", t * 1e6);
          j.attributeObject("args", [&] { j.attribute("bytes", bytes); });
        });
  }
  j.arrayEnd();
  j.attributeEnd();
  j.objectEnd();
  os << "\n";
}

static std::string xmlEscape(llvm::StringRef s) {
  std::string out;
  for (char c : s) {
    switch (c) {
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '&':
      out += "&amp;";
      break;
    case '"':
      out += "&quot;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

void pipemesh::sim::writeSvgTimeline(llvm::raw_ostream &os, const Job &job, const SimResult &res,
                                     llvm::StringRef title) {
  const double left = 70, right = 20, top = 40, rowH = 16, gap = 4, width = 1400;
  const size_t n = res.spans.size();
  const double plotW = width - left - right;
  const double height = top + n * (rowH + gap) + 70;
  const double step = res.stepTimeS > 0 ? res.stepTimeS : 1;
  auto x = [&](double t) { return left + t / step * plotW; };
  size_t total = 0;
  for (const auto &v : res.spans)
    total += v.size();
  const bool titles = total < 50000;

  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << (int)width << "\" height=\""
     << (int)height << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  os << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  os << "<text x=\"" << left << "\" y=\"18\" font-size=\"13\">" << xmlEscape(title) << "</text>\n";
  os << "<text x=\"" << left << "\" y=\"32\">"
     << llvm::format("step %.3f ms, bubble %.1f%%, exposed comm %.1f%%, all-device idle "
                     "%.1f%%, recompute %.1f%%",
                     res.stepTimeS * 1e3, 100 * res.bubbleFrac, 100 * res.exposedCommFrac,
                     100 * res.allDeviceIdleFrac, 100 * res.recomputeFrac)
     << "</text>\n";
  for (size_t r = 0; r < n; ++r) {
    double y = top + r * (rowH + gap);
    os << "<text x=\"" << left - 6 << "\" y=\"" << y + rowH - 4 << "\" text-anchor=\"end\">rank "
       << r << "</text>\n";
    for (const Span &s : res.spans[r]) {
      if (s.kind == SpanKind::P2P || s.kind == SpanKind::Collective)
        continue;
      double x0 = x(s.start), w = std::max(0.0, x(s.end) - x0);
      if (w <= 0)
        continue;
      os << "<rect x=\"" << llvm::format("%.2f", x0) << "\" y=\"" << y << "\" width=\""
         << llvm::format("%.2f", w) << "\" height=\"" << rowH << "\" fill=\"" << color(s)
         << "\"";
      if (s.kind == SpanKind::Compute)
        os << " stroke=\"white\" stroke-width=\"0.3\"";
      if (titles)
        os << "><title>" << xmlEscape(spanName(job, r, s))
           << llvm::format(" %.3f-%.3f ms", s.start * 1e3, s.end * 1e3) << "</title></rect>\n";
      else
        os << "/>\n";
    }
  }
  // Time axis and legend.
  double axisY = top + n * (rowH + gap) + 4;
  os << "<line x1=\"" << left << "\" y1=\"" << axisY << "\" x2=\"" << left + plotW << "\" y2=\""
     << axisY << "\" stroke=\"black\"/>\n";
  for (int k = 0; k <= 10; ++k) {
    double t = step * k / 10;
    os << "<text x=\"" << llvm::format("%.1f", x(t)) << "\" y=\"" << axisY + 14
       << "\" text-anchor=\"middle\">" << llvm::format("%.3g", t * 1e3) << "</text>\n";
  }
  os << "<text x=\"" << left + plotW << "\" y=\"" << axisY + 28 << "\" text-anchor=\"end\">ms</text>\n";
  struct Item {
    const char *name, *fill;
  } items[] = {{"forward", "#4c78a8"},   {"backward", "#59a14f"},     {"weight grad", "#76b7b2"},
               {"recompute", "#f28e2b"}, {"optimizer", "#b07aa1"},    {"other", "#9d9d9d"},
               {"bubble", "#eeeeee"},    {"exposed comm", "#e15759"}};
  double lx = left, ly = axisY + 36;
  for (const Item &it : items) {
    os << "<rect x=\"" << lx << "\" y=\"" << ly << "\" width=\"12\" height=\"12\" fill=\""
       << it.fill << "\" stroke=\"#888\" stroke-width=\"0.5\"/><text x=\"" << lx + 16
       << "\" y=\"" << ly + 10 << "\">" << it.name << "</text>\n";
    lx += 110;
  }
  os << "</svg>\n";
}
