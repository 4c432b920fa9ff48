//===- MemoryPlanner.cpp - static arena offsets from liveness --------------===//
//
// The greedy (biggest first, each at the lowest offset that fits) needs, for
// every range, the lowest offset whose `need` bytes no time-overlapping
// placed range occupies. A breadth-first plan at 128 micro-batches has 10^5
// ranges, most of them placed at offsets other ranges reuse at other times,
// so walking every placed range below the answer made planning quadratic
// (minutes per plan). Here the placed ranges are indexed by time instead: a
// segment tree over instruction indices whose nodes hold the union of the
// offset intervals of the ranges registered there, so a placement looks at
// O(log T) interval sets, merged lazily through a heap of cursors.
//
//===----------------------------------------------------------------------===//
#include "pipemesh/Plan/MemoryPlanner.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>

namespace pipemesh::plan {

static int64_t alignUp(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

namespace {

/// Disjoint, merged offset intervals [start, end), sorted. A flat vector:
/// most sets hold a few intervals (placed ranges that touch merge), and the
/// searches, not the inserts, dominate.
class IntervalUnion {
public:
  bool empty() const { return spans.empty(); }
  void insert(int64_t start, int64_t end) {
    // The first interval that ends at or after start: it and the ones after
    // it that begin by end merge with [start, end).
    auto first = std::lower_bound(spans.begin(), spans.end(), start,
                                  [](const Span &s, int64_t v) { return s.end < v; });
    auto last = first;
    while (last != spans.end() && last->start <= end) {
      start = std::min(start, last->start);
      end = std::max(end, last->end);
      ++last;
    }
    if (first == last) {
      spans.insert(first, Span{start, end});
      return;
    }
    *first = Span{start, end};
    spans.erase(first + 1, last);
  }
  struct Span {
    int64_t start, end;
  };
  const Span *begin() const { return spans.data(); }
  const Span *end() const { return spans.data() + spans.size(); }

private:
  std::vector<Span> spans;
};

/// The placed ranges by time. A perfect binary tree over instruction indices;
/// a range is registered at the canonical (maximal) nodes that tile its time
/// span: `cover` of such a node holds the ranges covering its whole span,
/// `touched` of every node holds (at least) the ranges registered at it or
/// below. Canonical nodes of two spans intersect only as ancestor and
/// descendant, and every strict ancestor of a canonical node contains one
/// of the span's end points, so the ranges overlapping [a, b] in time are
/// those in `touched` of [a, b]'s canonical nodes and in `cover` of the
/// nodes on the paths to leaves a and b (the sets may hold more ranges that
/// overlap [a, b]: never one that does not).
class PlacedByTime {
public:
  explicit PlacedByTime(int64_t times) {
    while ((int64_t)leaves < times)
      leaves *= 2;
    cover.resize(2 * leaves);
    touched.resize(2 * leaves);
  }

  void place(int64_t first, int64_t last, int64_t start, int64_t end) {
    forCanonical(first, last, [&](size_t node) {
      cover[node].insert(start, end);
      touched[node].insert(start, end);
    });
    forPaths(first, last, [&](size_t node) { touched[node].insert(start, end); });
  }

  /// The lowest offset x >= 0 at which [x, x + need) meets no range placed
  /// during [first, last].
  int64_t lowestFit(int64_t first, int64_t last, int64_t need) {
    sets.clear();
    auto add = [&](const IntervalUnion &s) {
      if (!s.empty())
        sets.push_back(&s);
    };
    forCanonical(first, last, [&](size_t node) { add(touched[node]); });
    forPaths(first, last, [&](size_t node) { add(cover[node]); });
    // A cursor per set at its first interval that may still meet
    // [x, x + need), the cursors in a min-heap by that interval's start:
    // the lowest start either ends by x (stale: the cursor moves on), meets
    // [x, x + need) (x jumps past it) or starts at x + need or later, and
    // then no interval of any set meets [x, x + need).
    using Span = IntervalUnion::Span;
    cursors.clear();
    for (const IntervalUnion *s : sets)
      cursors.push_back({s->begin(), s->end()});
    auto later = [](const Cursor &a, const Cursor &b) { return a.at->start > b.at->start; };
    std::make_heap(cursors.begin(), cursors.end(), later);
    int64_t x = 0;
    while (!cursors.empty()) {
      std::pop_heap(cursors.begin(), cursors.end(), later);
      Cursor &c = cursors.back();
      if (c.at->end <= x)
        c.at = std::upper_bound(c.at, c.end, x,
                                [](int64_t v, const Span &s) { return v < s.end; });
      else if (c.at->start >= x + need)
        return x;
      else
        x = (c.at++)->end; // the set's next interval starts after this one ends
      if (c.at == c.end)
        cursors.pop_back();
      else
        std::push_heap(cursors.begin(), cursors.end(), later);
    }
    return x;
  }

private:
  template <typename F> void forCanonical(int64_t first, int64_t last, F f) {
    for (size_t l = first + leaves, r = last + leaves + 1; l < r; l /= 2, r /= 2) {
      if (l & 1)
        f(l++);
      if (r & 1)
        f(--r);
    }
  }
  /// Every node on the paths from the root to leaves first and last (the
  /// shared part once).
  template <typename F> void forPaths(int64_t first, int64_t last, F f) {
    for (size_t l = first + leaves, r = last + leaves; l >= 1; l /= 2, r /= 2) {
      f(l);
      if (r != l)
        f(r);
    }
  }

  size_t leaves = 1;
  std::vector<IntervalUnion> cover, touched;
  std::vector<const IntervalUnion *> sets;
  struct Cursor {
    const IntervalUnion::Span *at, *end;
  };
  std::vector<Cursor> cursors;
};

} // namespace

int64_t assignOffsets(llvm::ArrayRef<LiveRange> ranges, llvm::SmallVectorImpl<int64_t> &offsets,
                      int64_t alignment) {
  offsets.assign(ranges.size(), 0);
  std::vector<size_t> order(ranges.size());
  std::iota(order.begin(), order.end(), 0);
  // Big buffers first: they are the hardest to fit into gaps.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ranges[a].bytes > ranges[b].bytes; });
  int64_t times = 1;
  for (const LiveRange &r : ranges)
    times = std::max(times, r.last + 1);
  PlacedByTime placed(times);
  int64_t peak = 0;
  for (size_t i : order) {
    const LiveRange &r = ranges[i];
    int64_t need = alignUp(r.bytes, alignment);
    if (need == 0)
      continue; // offset 0; occupies nothing
    int64_t at = placed.lowestFit(r.first, r.last, need);
    offsets[i] = at;
    peak = std::max(peak, at + need);
    placed.place(r.first, r.last, at, at + need);
  }
  return peak;
}

int64_t liveBytesLowerBound(llvm::ArrayRef<LiveRange> ranges) {
  std::map<int64_t, int64_t> delta;
  for (const LiveRange &r : ranges) {
    delta[r.first] += r.bytes;
    delta[r.last + 1] -= r.bytes;
  }
  int64_t live = 0, peak = 0;
  for (auto [t, d] : delta) {
    live += d;
    peak = std::max(peak, live);
  }
  return peak;
}

} // namespace pipemesh::plan
