//===- PMeshOps.td - pmesh operations ----------------------------*- tablegen -*-===//
//
// Every op with a computed result shape verifies it through the shared shape
// functions in ShapeFunctions.h, so the importer, the rewrite patterns and the
// verifier agree on one definition of each op's shape semantics.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEMESH_DIALECT_PMESH_OPS_TD
#define PIPEMESH_DIALECT_PMESH_OPS_TD

include "pipemesh/Dialect/PMesh/PMeshDialect.td"
include "pipemesh/Dialect/PMesh/PMeshInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/RegionKindInterface.td"

// All values are statically shaped tensors: shapes are bound at import time.
def PMesh_Tensor : StaticShapeTensorOf<[AnyFloat, AnySignlessInteger]>;
def PMesh_FloatTensor : StaticShapeTensorOf<[AnyFloat]>;
def PMesh_IndexTensor : StaticShapeTensorOf<[I32, I64]>;
def PMesh_BoolTensor : StaticShapeTensorOf<[I1]>;

//===----------------------------------------------------------------------===//
// Parameters and constants
//===----------------------------------------------------------------------===//

def PMesh_ParamOp : PMesh_Op<"param", [Symbol, IsolatedFromAbove]> {
  let summary = "a trainable parameter (module-level symbol)";
  let description = [{
    Declares a trainable tensor. Its data is not in the IR: `source` names the
    ONNX initializer holding the initial values (several parameters may share
    one source when an exporter deduplicated equal initial values). `tied`
    lists extra names under which the model uses the same parameter.

    ```mlir
    pmesh.param @wte : tensor<50257x768xf32> {source = "transformer.wte.weight"}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<PMesh_Tensor>:$type,
                       OptionalAttr<StrAttr>:$source);
  let assemblyFormat = "$sym_name `:` $type attr-dict";
  let hasVerifier = 1;
}

def PMesh_GetParamOp : PMesh_Op<"get_param",
    [Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "reads a parameter by symbol";
  let arguments = (ins FlatSymbolRefAttr:$name);
  let results = (outs PMesh_Tensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
}

def PMesh_ConstantOp : PMesh_Op<"constant",
    [Pure, ConstantLike, AllTypesMatch<["value", "result"]>]> {
  let summary = "a small constant tensor (never a weight)";
  let arguments = (ins ElementsAttr:$value);
  let results = (outs PMesh_Tensor:$result);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
  let hasVerifier = 1;
  let builders = [OpBuilder<(ins "::mlir::ElementsAttr":$value), [{
    build($_builder, $_state, value.getType(), value);
  }]>];
}

//===----------------------------------------------------------------------===//
// Elementwise ops (numpy broadcasting)
//===----------------------------------------------------------------------===//

class PMesh_BinaryOp<string mnemonic, list<Trait> traits = []> :
    PMesh_Op<mnemonic, !listconcat([Pure, DeclareOpInterfaceMethods<PMesh_DifferentiableOpInterface>], traits)> {
  let arguments = (ins PMesh_Tensor:$lhs, PMesh_Tensor:$rhs);
  let results = (outs PMesh_Tensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def PMesh_AddOp : PMesh_BinaryOp<"add", [Commutative]> { let summary = "lhs + rhs"; }
def PMesh_SubOp : PMesh_BinaryOp<"sub"> { let summary = "lhs - rhs"; }
def PMesh_MulOp : PMesh_BinaryOp<"mul", [Commutative]> { let summary = "lhs * rhs"; }
def PMesh_DivOp : PMesh_BinaryOp<"div"> { let summary = "lhs / rhs"; }
def PMesh_PowOp : PMesh_BinaryOp<"pow"> { let summary = "lhs ** rhs"; }
def PMesh_MaxOp : PMesh_BinaryOp<"max", [Commutative]> { let summary = "max(lhs, rhs)"; }
def PMesh_EqualOp : PMesh_BinaryOp<"equal", [Commutative]> {
  let summary = "lhs == rhs (i1 result)";
}
def PMesh_LessOp : PMesh_BinaryOp<"less"> { let summary = "lhs < rhs (i1 result)"; }
def PMesh_AndOp : PMesh_BinaryOp<"and", [Commutative]> { let summary = "logical and (i1)"; }

class PMesh_UnaryOp<string mnemonic, list<Trait> traits = []> :
    PMesh_Op<mnemonic, !listconcat([Pure, SameOperandsAndResultType, DeclareOpInterfaceMethods<PMesh_DifferentiableOpInterface>], traits)> {
  let arguments = (ins PMesh_Tensor:$input);
  let results = (outs PMesh_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

// Transcendental functions are defined on floats only (as in ONNX).
class PMesh_FloatUnaryOp<string mnemonic> : PMesh_UnaryOp<mnemonic> {
  let arguments = (ins PMesh_FloatTensor:$input);
  let results = (outs PMesh_FloatTensor:$result);
}

def PMesh_NegOp : PMesh_UnaryOp<"neg"> { let summary = "-x"; }
def PMesh_SqrtOp : PMesh_FloatUnaryOp<"sqrt"> { let summary = "sqrt(x)"; }
def PMesh_TanhOp : PMesh_FloatUnaryOp<"tanh"> { let summary = "tanh(x)"; }
def PMesh_ErfOp : PMesh_FloatUnaryOp<"erf"> { let summary = "erf(x)"; }
def PMesh_ExpOp : PMesh_FloatUnaryOp<"exp"> { let summary = "exp(x)"; }
def PMesh_LogOp : PMesh_FloatUnaryOp<"log"> { let summary = "log(x)"; }
def PMesh_SigmoidOp : PMesh_FloatUnaryOp<"sigmoid"> { let summary = "1 / (1 + exp(-x))"; }
def PMesh_NotOp : PMesh_UnaryOp<"not"> {
  let summary = "logical not (i1)";
  let arguments = (ins PMesh_BoolTensor:$input);
  let results = (outs PMesh_BoolTensor:$result);
}

def PMesh_CastOp : PMesh_Op<"cast", [Pure, DeclareOpInterfaceMethods<PMesh_DifferentiableOpInterface>]> {
  let summary = "element type conversion";
  let arguments = (ins PMesh_Tensor:$input);
  let results = (outs PMesh_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def PMesh_WhereOp : PMesh_Op<"where", [Pure, DeclareOpInterfaceMethods<PMesh_DifferentiableOpInterface>]> {
  let summary = "select(cond, on_true, on_false) with broadcasting";
  let arguments = (ins PMesh_BoolTensor:$cond, PMesh_Tensor:$on_true,
                       PMesh_Tensor:$on_false);
  let results = (outs PMesh_Tensor:$result);
  let assemblyFormat = "$cond `,` $on_true `,` $on_false attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

class PMesh_ReduceOp<string mnemonic> : PMesh_Op<mnemonic, [Pure, DeclareOpInterfaceMethods<PMesh_DifferentiableOpInterface>]> {
  let arguments = (ins PMesh_Tensor:$input, DenseI64ArrayAttr:$axes,
                       DefaultValuedAttr<BoolAttr, "true">:$keepdims);
  let results = (outs PMesh_Tensor:$result);
  let assemblyFormat = "$input `axes` `=` $axes attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def PMesh_ReduceMeanOp : PMesh_ReduceOp<"reduce_mean"> { let summary = "mean over axes"; }
def PMesh_ReduceSumOp : PMesh_ReduceOp<"reduce_sum"> { let summary = "sum over axes"; }

//===----------------------------------------------------------------------===//
// Fused neural-network ops
//===----------------------------------------------------------------------===//

def PMesh_MatMulOp : PMesh_Op<"matmul", [Pure, DeclareOpInterfaceMethods<PMesh_DifferentiableOpInterface>]> {
  let summary = "batched matrix product with optional bias and transposes";
  let description = [{
    `result = op(a) @ op(b) + bias`, where op transposes the last two dims when
    `transpose_a` / `transpose_b` is set. Leading (batch) dims broadcast as in
    numpy; `b` may be 2-D (a weight shared by every batch). `bias` is 1-D with
    the output's last dim and broadcast over the rest.
  }];
  let arguments = (ins PMesh_FloatTensor:$a, PMesh_FloatTensor:$b,
                       Optional<PMesh_FloatTensor>:$bias,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_a,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_b);
  let results = (outs PMesh_FloatTensor:$result);
  let assemblyFormat = [{
    $a `,` $b (`bias` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def PMesh_LayerNormOp : PMesh_Op<"layer_norm", [Pure, DeclareOpInterfaceMethods<PMesh_DifferentiableOpInterface>]> {
  let summary = "layer normalization over the trailing dims from `axis`";
  let arguments = (ins PMesh_FloatTensor:$input, PMesh_FloatTensor:$scale,
                       Optional<PMesh_FloatTensor>:$bias,
                       DefaultValuedAttr<F32Attr, "1e-5">:$epsilon,
                       DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs PMesh_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $scale (`,` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def PMesh_GeluOp : PMesh_Op<"gelu", [Pure, SameOperandsAndResultType, DeclareOpInterfaceMethods<PMesh_DifferentiableOpInterface>]> {
  let summary = "GELU activation, exact (erf) or tanh approximation";
  let arguments = (ins PMesh_FloatTensor:$input,
                       DefaultValuedAttr<StrAttr, "\"none\"">:$approximate);
  let results = (outs PMesh_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def PMesh_SoftmaxOp : PMesh_Op<"softmax", [Pure, SameOperandsAndResultType, DeclareOpInterfaceMethods<PMesh_DifferentiableOpInterface>]> {
  let summary = "softmax along `axis`";
  let arguments = (ins PMesh_FloatTensor:$input, DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs PMesh_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def PMesh_LogSoftmaxOp : PMesh_Op<"log_softmax", [Pure, SameOperandsAndResultType, DeclareOpInterfaceMethods<PMesh_DifferentiableOpInterface>]> {
  let summary = "log(softmax) along `axis`";
  let arguments = (ins PMesh_FloatTensor:$input, DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs PMesh_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def PMesh_AttentionOp : PMesh_Op<"attention", [Pure, DeclareOpInterfaceMethods<PMesh_DifferentiableOpInterface>]> {
  let summary = "scaled dot-product attention, optionally causal and masked";
  let description = [{
    `softmax(cap(scale * q @ k^T) [+ mask], causal) @ v` over the last two dims:
    q is [..., Tq, D], k is [..., Tk, D], v is [..., Tk, Dv]; the leading dims
    (batch, heads) of k and v are q's, or q's with the last (the heads)
    divided by a group size g: grouped-query attention, query head h reads
    key and value head h / g (Llama's repeat_kv, without the copies; k and v
    may have different groups). `mask` is additive and broadcasts to
    [..., Tq, Tk], q's leading dims. `causal` hides keys after the query position (aligned to the
    end, so Tq < Tk attends to the last Tq positions). `window` > 0 (with
    `causal`) is sliding-window attention: the query at key position p sees
    the keys p - window < j <= p only (Mistral, Gemma's and GPT-Neo's local
    layers); 0 is no limit. `softcap` > 0 caps the scores before the mask,
    cap(s) = softcap * tanh(s / softcap) (Gemma 2); 0 leaves them as they
    are. A query row whose every visible key is masked
    (mask <= -1e30, e.g. left padding) has an unspecified result, as it has
    in the exporters' decomposed form.
  }];
  let arguments = (ins PMesh_FloatTensor:$q, PMesh_FloatTensor:$k,
                       PMesh_FloatTensor:$v, Optional<PMesh_FloatTensor>:$mask,
                       F32Attr:$scale,
                       DefaultValuedAttr<BoolAttr, "true">:$causal,
                       DefaultValuedAttr<I64Attr, "0">:$window,
                       DefaultValuedAttr<F32Attr, "0.0f">:$softcap);
  let results = (outs PMesh_FloatTensor:$result);
  let assemblyFormat = [{
    $q `,` $k `,` $v (`mask` $mask^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def PMesh_EmbeddingOp : PMesh_Op<"embedding", [Pure, DeclareOpInterfaceMethods<PMesh_DifferentiableOpInterface>]> {
  let summary = "table lookup: result[..., :] = table[ids[...], :]";
  let arguments = (ins PMesh_FloatTensor:$table, PMesh_IndexTensor:$ids);
  let results = (outs PMesh_FloatTensor:$result);
  let assemblyFormat = "$table `,` $ids attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def PMesh_CrossEntropyOp : PMesh_Op<"cross_entropy", [Pure, DeclareOpInterfaceMethods<PMesh_DifferentiableOpInterface>]> {
  let summary = "softmax cross-entropy of logits against integer targets";
  let description = [{
    logits are [N..., V], targets [N...]. Targets equal to `ignore_index` do
    not count. `reduction` is "mean" (over counted targets; a 0-d result),
    "sum" (0-d) or "none" (shape of targets).
  }];
  let arguments = (ins PMesh_FloatTensor:$logits, PMesh_IndexTensor:$targets,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                       DefaultValuedAttr<StrAttr, "\"mean\"">:$reduction);
  let results = (outs PMesh_FloatTensor:$result);
  let assemblyFormat = "$logits `,` $targets attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Shape ops
//===----------------------------------------------------------------------===//

def PMesh_ReshapeOp : PMesh_Op<"reshape", [Pure, DeclareOpInterfaceMethods<PMesh_DifferentiableOpInterface>]> {
  let summary = "same elements, new static shape";
  let arguments = (ins PMesh_Tensor:$input);
  let results = (outs PMesh_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def PMesh_TransposeOp : PMesh_Op<"transpose", [Pure, DeclareOpInterfaceMethods<PMesh_DifferentiableOpInterface>]> {
  let summary = "permutes dims: result dim i is input dim perm[i]";
  let arguments = (ins PMesh_Tensor:$input, DenseI64ArrayAttr:$perm);
  let results = (outs PMesh_Tensor:$result);
  let assemblyFormat = "$input `perm` `=` $perm attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def PMesh_BroadcastOp : PMesh_Op<"broadcast", [Pure, DeclareOpInterfaceMethods<PMesh_DifferentiableOpInterface>]> {
  let summary = "numpy broadcast to the result shape (ONNX Expand)";
  let arguments = (ins PMesh_Tensor:$input);
  let results = (outs PMesh_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def PMesh_SplitOp : PMesh_Op<"split", [Pure, DeclareOpInterfaceMethods<PMesh_DifferentiableOpInterface>]> {
  let summary = "splits along `axis` into pieces of the given sizes";
  let arguments = (ins PMesh_Tensor:$input, I64Attr:$axis, DenseI64ArrayAttr:$sizes);
  let results = (outs Variadic<PMesh_Tensor>:$results);
  let assemblyFormat = "$input `axis` `=` $axis `sizes` `=` $sizes attr-dict `:` type($input) `->` type($results)";
  let hasVerifier = 1;
}

def PMesh_ConcatOp : PMesh_Op<"concat", [Pure, DeclareOpInterfaceMethods<PMesh_DifferentiableOpInterface>]> {
  let summary = "concatenates along `axis`";
  let arguments = (ins Variadic<PMesh_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs PMesh_Tensor:$result);
  let assemblyFormat = "$inputs `axis` `=` $axis attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def PMesh_SliceOp : PMesh_Op<"slice", [Pure, DeclareOpInterfaceMethods<PMesh_DifferentiableOpInterface>]> {
  let summary = "strided slice, one start/limit/stride per dim (stride > 0)";
  let arguments = (ins PMesh_Tensor:$input, DenseI64ArrayAttr:$starts,
                       DenseI64ArrayAttr:$limits, DenseI64ArrayAttr:$strides);
  let results = (outs PMesh_Tensor:$result);
  let assemblyFormat = [{
    $input `[` $starts `:` $limits `:` $strides `]` attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
}

include "pipemesh/Dialect/PMesh/PMeshTrainOps.td"
include "pipemesh/Dialect/PMesh/PMeshParallelOps.td"

#endif // PIPEMESH_DIALECT_PMESH_OPS_TD
