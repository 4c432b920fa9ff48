//===- PMeshTrainOps.td - gradient and optimizer ops -------------*- tablegen -*-===//
//
// Composite gradient ops keep the backward graph small and make the saved
// activations explicit operands (what a schedule must keep alive, or
// recompute). Included from PMeshOps.td.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEMESH_DIALECT_PMESH_TRAIN_OPS_TD
#define PIPEMESH_DIALECT_PMESH_TRAIN_OPS_TD

def PMesh_LayerNormGradOp : PMesh_Op<"layer_norm_grad", [Pure]> {
  let summary = "gradients of layer_norm with respect to input, scale and bias";
  let description = [{
    Recomputes the row statistics from the saved input `x`. `dbias` is the
    gradient of the bias (produced even when the forward op had none).
  }];
  let arguments = (ins PMesh_FloatTensor:$dy, PMesh_FloatTensor:$x, PMesh_FloatTensor:$scale,
                       DefaultValuedAttr<F32Attr, "1e-5">:$epsilon,
                       DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs PMesh_FloatTensor:$dx, PMesh_FloatTensor:$dscale,
                      PMesh_FloatTensor:$dbias);
  let assemblyFormat = "$dy `,` $x `,` $scale attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def PMesh_GeluGradOp : PMesh_Op<"gelu_grad", [Pure, SameOperandsAndResultType]> {
  let summary = "dy * gelu'(x)";
  let arguments = (ins PMesh_FloatTensor:$dy, PMesh_FloatTensor:$x,
                       DefaultValuedAttr<StrAttr, "\"none\"">:$approximate);
  let results = (outs PMesh_FloatTensor:$dx);
  let assemblyFormat = "$dy `,` $x attr-dict `:` type($dx)";
}

def PMesh_SoftmaxGradOp : PMesh_Op<"softmax_grad", [Pure, SameOperandsAndResultType]> {
  let summary = "y * (dy - sum(dy * y)) along `axis`, from the saved output y";
  let arguments = (ins PMesh_FloatTensor:$dy, PMesh_FloatTensor:$y,
                       DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs PMesh_FloatTensor:$dx);
  let assemblyFormat = "$dy `,` $y attr-dict `:` type($dx)";
}

def PMesh_LogSoftmaxGradOp : PMesh_Op<"log_softmax_grad", [Pure, SameOperandsAndResultType]> {
  let summary = "dy - exp(y) * sum(dy) along `axis`, from the saved output y";
  let arguments = (ins PMesh_FloatTensor:$dy, PMesh_FloatTensor:$y,
                       DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs PMesh_FloatTensor:$dx);
  let assemblyFormat = "$dy `,` $y attr-dict `:` type($dx)";
}

def PMesh_AttentionGradOp : PMesh_Op<"attention_grad", [Pure]> {
  let summary = "gradients of attention with respect to q, k and v";
  let description = [{
    Recomputes the attention probabilities from the saved q, k, v (and mask),
    flash-attention style. The mask receives no gradient. Under grouped-query
    attention, dk and dv sum over the query heads that read each head.
  }];
  let arguments = (ins PMesh_FloatTensor:$dout, PMesh_FloatTensor:$q, PMesh_FloatTensor:$k,
                       PMesh_FloatTensor:$v, Optional<PMesh_FloatTensor>:$mask,
                       F32Attr:$scale, DefaultValuedAttr<BoolAttr, "true">:$causal,
                       DefaultValuedAttr<I64Attr, "0">:$window,
                       DefaultValuedAttr<F32Attr, "0.0f">:$softcap);
  let results = (outs PMesh_FloatTensor:$dq, PMesh_FloatTensor:$dk, PMesh_FloatTensor:$dv);
  let assemblyFormat = [{
    $dout `,` $q `,` $k `,` $v (`mask` $mask^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def PMesh_EmbeddingGradOp : PMesh_Op<"embedding_grad", [Pure]> {
  let summary = "scatter-add of dy rows into a zero table (deterministic)";
  let arguments = (ins PMesh_FloatTensor:$dy, PMesh_IndexTensor:$ids);
  let results = (outs PMesh_FloatTensor:$dtable);
  let assemblyFormat = "$dy `,` $ids attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def PMesh_CrossEntropyGradOp : PMesh_Op<"cross_entropy_grad", [Pure]> {
  let summary = "gradient of cross_entropy with respect to the logits";
  let description = [{
    `dloss` has the shape of the forward result (0-d for mean/sum, the targets'
    shape for none). For "mean" the gradient is divided by the number of
    counted targets, as the forward mean is.
  }];
  let arguments = (ins PMesh_FloatTensor:$dloss, PMesh_FloatTensor:$logits,
                       PMesh_IndexTensor:$targets,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                       DefaultValuedAttr<StrAttr, "\"mean\"">:$reduction);
  let results = (outs PMesh_FloatTensor:$dlogits);
  let assemblyFormat = "$dloss `,` $logits `,` $targets attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def PMesh_SliceGradOp : PMesh_Op<"slice_grad", [Pure]> {
  let summary = "scatters dy into zeros of the sliced input's shape";
  let arguments = (ins PMesh_Tensor:$dy, DenseI64ArrayAttr:$starts,
                       DenseI64ArrayAttr:$limits, DenseI64ArrayAttr:$strides);
  let results = (outs PMesh_Tensor:$dx);
  let assemblyFormat = [{
    $dy `[` $starts `:` $limits `:` $strides `]` attr-dict `:` type($dy) `->` type($dx)
  }];
  let hasVerifier = 1;
}

def PMesh_AccumulateGradOp : PMesh_Op<"accumulate_grad",
    [DeclareOpInterfaceMethods<SymbolUserOpInterface>,
     MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "adds a micro-batch gradient into a parameter's gradient buffer";
  let arguments = (ins FlatSymbolRefAttr:$param, PMesh_FloatTensor:$grad);
  let assemblyFormat = "$param `,` $grad attr-dict `:` type($grad)";
}

def PMesh_AdamWOp : PMesh_Op<"adamw", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "global-norm clipping and the AdamW update of the listed parameters";
  let description = [{
    Runs once per step after every micro-batch accumulated its gradients.
    Hyper-parameters (lr after warmup/schedule, betas, eps, weight decay,
    clipping norm) are runtime inputs, so changing them never recompiles.
    `decay` says per parameter whether weight decay applies (rank >= 2).
  }];
  let arguments = (ins FlatSymbolRefArrayAttr:$params, DenseBoolArrayAttr:$decay);
  let assemblyFormat = "$params `decay` `=` $decay attr-dict";
  let hasVerifier = 1;
}

#endif // PIPEMESH_DIALECT_PMESH_TRAIN_OPS_TD
