//===- RaiseGelu.cpp - raise the GELU formulas to pmesh.gelu ---------------===//
//
// ONNX has no GELU before opset 20, so exporters spell it out:
//
//   tanh: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
//   erf:  0.5 * x * (1 + erf(x / sqrt(2)))
//
// and every exporter associates and commutes the products differently
// (mul(mul(x, 0.5), add(t, 1)), mul(0.5, mul(x, ...)), x * (1 + erf) / 2,
// x^3 as pow(x, 3) or x * x * x, sqrt(2/pi) * x * (1 + 0.044715 x^2), ...).
// Rather than enumerate the trees, the matcher evaluates the expression
// symbolically: as a polynomial in x and t = tanh(arg) / erf(arg) for the
// outer product, and as a polynomial in x for arg. Any tree of add, sub,
// mul, div by a constant, neg, pow by a small integer and sqrt of a constant
// over the leaf x matches exactly when the polynomials agree with the formula
// up to exporter rounding. Each interior op must feed only the formula, so a
// raised chain always dies completely.
//
//===----------------------------------------------------------------------===//
#include "RaiseUtils.h"

#include <cmath>
#include <map>

using namespace mlir;
using namespace pipemesh;
using namespace pipemesh::pmesh;
using namespace pipemesh::raise;

namespace {

/// A polynomial in x and t, degree <= kMaxDegreeX in x and <= 1 in t (larger
/// degrees never occur in GELU, so hitting them ends the match).
class Poly {
public:
  static constexpr unsigned kMaxDegreeX = 4;
  using Monomial = std::pair<unsigned, unsigned>; // (degree of x, degree of t)

  static Poly constant(double c) { return Poly({{{0, 0}, c}}); }
  static Poly x() { return Poly({{{1, 0}, 1.0}}); }
  static Poly t() { return Poly({{{0, 1}, 1.0}}); }

  std::optional<double> asConstant() const {
    for (auto &[m, c] : terms)
      if (m != Monomial{0, 0} && c != 0.0)
        return std::nullopt;
    auto it = terms.find({0, 0});
    return it == terms.end() ? 0.0 : it->second;
  }

  Poly operator+(const Poly &o) const {
    Poly r = *this;
    for (auto &[m, c] : o.terms)
      r.terms[m] += c;
    return r;
  }
  Poly scaled(double s) const {
    Poly r = *this;
    for (auto &[m, c] : r.terms)
      c *= s;
    return r;
  }
  std::optional<Poly> operator*(const Poly &o) const {
    Poly r;
    for (auto &[m1, c1] : terms)
      for (auto &[m2, c2] : o.terms) {
        Monomial m{m1.first + m2.first, m1.second + m2.second};
        if (m.first > kMaxDegreeX || m.second > 1)
          return std::nullopt;
        r.terms[m] += c1 * c2;
      }
    return r;
  }

  /// Every coefficient within tolerance of `expected`'s, relative to its own
  /// magnitude; coefficients expected to be 0 must be small next to the
  /// largest expected one (exporters never write a term that should vanish,
  /// but float products of rounded constants can leave a tiny remainder).
  bool isNear(const Poly &expected) const {
    double largest = 0;
    for (auto &[m, c] : expected.terms)
      largest = std::max(largest, std::fabs(c));
    auto coefficient = [](const Poly &p, Monomial m) {
      auto it = p.terms.find(m);
      return it == p.terms.end() ? 0.0 : it->second;
    };
    for (const Poly *p : {this, &expected})
      for (const auto &term : p->terms) {
        Monomial m = term.first;
        double want = coefficient(expected, m);
        double magnitude = want != 0.0 ? std::fabs(want) : largest;
        if (!raise::isNear(coefficient(*this, m), want, kConstantRelTol, magnitude))
          return false;
      }
    return true;
  }

private:
  Poly() = default;
  explicit Poly(std::map<Monomial, double> terms) : terms(std::move(terms)) {}
  std::map<Monomial, double> terms;
};

/// Evaluates a GELU candidate. `x` is the one leaf every non-constant path
/// must end in; `transcendental` the one tanh/erf op the outer expression
/// may contain.
class GeluEvaluator {
public:
  explicit GeluEvaluator(Operation *root) : root(root) {}

  /// The polynomial computed by `v`; `allowT` is false inside the argument
  /// of the transcendental (no nesting).
  std::optional<Poly> eval(Value v, bool allowT) {
    if (v == x)
      return Poly::x();
    if (auto c = getSplatFloat(v))
      return Poly::constant(*c);
    Operation *op = v.getDefiningOp();
    // Only ops that feed nothing but this formula are part of it; anything
    // else (in particular x itself, which the formula uses at least twice) is
    // a leaf.
    if (!op || (op != root && !op->hasOneUse()) || !isInterior(op))
      return leaf(v);
    if (++visited > kMaxOps)
      return std::nullopt;

    if (isa<TanhOp, ErfOp>(op)) {
      if (!allowT || transcendental)
        return std::nullopt;
      transcendental = op;
      return Poly::t();
    }
    auto lhs = eval(op->getOperand(0), allowT);
    if (!lhs)
      return std::nullopt;
    if (isa<NegOp>(op))
      return lhs->scaled(-1.0);
    if (isa<SqrtOp>(op)) {
      std::optional<double> c = lhs->asConstant();
      if (!c || *c < 0.0)
        return std::nullopt;
      return Poly::constant(std::sqrt(*c));
    }
    if (auto pow = dyn_cast<PowOp>(op)) {
      std::optional<double> e = getSplatFloat(pow.getRhs());
      if (!e || *e != std::floor(*e) || *e < 0.0 || *e > Poly::kMaxDegreeX)
        return std::nullopt;
      std::optional<Poly> r = Poly::constant(1.0);
      for (int i = 0; i < (int)*e && r; ++i)
        r = *r * *lhs;
      return r;
    }
    auto rhs = eval(op->getOperand(1), allowT);
    if (!rhs)
      return std::nullopt;
    if (isa<AddOp>(op))
      return *lhs + *rhs;
    if (isa<SubOp>(op))
      return *lhs + rhs->scaled(-1.0);
    if (isa<MulOp>(op))
      return *lhs * *rhs;
    // DivOp: only by a constant, to stay a polynomial.
    std::optional<double> c = rhs->asConstant();
    if (!c || *c == 0.0)
      return std::nullopt;
    return lhs->scaled(1.0 / *c);
  }

  Value x;
  Operation *transcendental = nullptr;

private:
  static constexpr unsigned kMaxOps = 64; // GELU needs about 10

  static bool isInterior(Operation *op) {
    return isa<AddOp, SubOp, MulOp, DivOp, PowOp, NegOp, SqrtOp, TanhOp, ErfOp>(op);
  }

  std::optional<Poly> leaf(Value v) {
    if (x && v != x)
      return std::nullopt;
    x = v;
    return Poly::x();
  }

  Operation *root;
  unsigned visited = 0;
};

/// 0.5 * x * (1 + tanh|erf(...)) in any arrangement -> pmesh.gelu x.
/// Rooted at each op kind the formula can end in.
template <typename RootOp>
struct RaiseGelu : OpRewritePattern<RootOp> {
  using OpRewritePattern<RootOp>::OpRewritePattern;

  LogicalResult matchAndRewrite(RootOp root, PatternRewriter &rewriter) const override {
    auto type = dyn_cast<RankedTensorType>(root.getType());
    if (!type || !isa<FloatType>(type.getElementType()))
      return failure();
    GeluEvaluator ev(root);
    std::optional<Poly> outer = ev.eval(root.getResult(), /*allowT=*/true);
    if (!outer || !ev.transcendental || !ev.x)
      return rewriter.notifyMatchFailure(root, "not a product with tanh or erf");
    // gelu(x) has x's type: the formula must not broadcast x (a splat constant
    // of higher rank would).
    if (ev.x.getType() != type)
      return rewriter.notifyMatchFailure(root, "formula broadcasts x");

    // 0.5 x + 0.5 x t.
    Poly half = Poly::constant(0.5);
    Poly expectedOuter = *(half * Poly::x()) + *(*(half * Poly::x()) * Poly::t());
    if (!outer->isNear(expectedOuter))
      return rewriter.notifyMatchFailure(root, "outer product is not 0.5 x (1 + t)");

    std::optional<Poly> arg = ev.eval(ev.transcendental->getOperand(0), /*allowT=*/false);
    if (!arg)
      return rewriter.notifyMatchFailure(root, "argument is not a polynomial in x");
    StringRef approximate;
    if (isa<TanhOp>(ev.transcendental)) {
      // sqrt(2/pi) * (x + 0.044715 x^3)
      double k = std::sqrt(2.0 / M_PI);
      Poly cube = *(*(Poly::x() * Poly::x()) * Poly::x());
      Poly expected = Poly::x().scaled(k) + cube.scaled(k * 0.044715);
      if (!arg->isNear(expected))
        return rewriter.notifyMatchFailure(root, "tanh argument is not the GELU one");
      approximate = "tanh";
    } else {
      // x / sqrt(2)
      if (!arg->isNear(Poly::x().scaled(M_SQRT1_2)))
        return rewriter.notifyMatchFailure(root, "erf argument is not x / sqrt(2)");
      approximate = "none";
    }
    rewriter.replaceOpWithNewOp<GeluOp>(root, type, ev.x, approximate);
    return success();
  }
};

} // namespace

void pipemesh::raise::populateRaiseGeluPatterns(RewritePatternSet &patterns) {
  patterns.add<RaiseGelu<MulOp>, RaiseGelu<DivOp>, RaiseGelu<AddOp>>(patterns.getContext());
}
