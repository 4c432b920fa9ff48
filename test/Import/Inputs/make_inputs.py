#!/usr/bin/env python3
"""Writes the binary inputs of the importer's error-path lit tests.

Run with Debian's interpreter (it has python3-onnx):
    /usr/bin/python3 test/Import/Inputs/make_inputs.py
The outputs are committed next to this script; rerunning rewrites them
byte for byte.
"""
import os

import onnx
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))


def small_model(nodes, inits=(), opset=17):
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 4])
    graph = helper.make_graph(nodes, "g", [x], [y], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="make_inputs.py")
    model.ir_version = 8
    return model


def external_tensor(name, dims, location, offset=0, length=None):
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    for key, value in [("location", location), ("offset", str(offset))] + (
            [("length", str(length))] if length is not None else []):
        entry = t.external_data.add()
        entry.key = key
        entry.value = value
    return t


def write(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


def main():
    add = small_model([helper.make_node("Add", ["X", "X"], ["Y"], name="double_it")])
    # Not a model at all, and a model cut short in the middle of its graph.
    write("not_onnx.onnx", b"This is a text file, not an ONNX model.\n")
    data = add.SerializeToString()
    write("truncated.onnx", data[: len(data) - 7])

    # A named node of an op the importer does not know.
    write("unsupported_op.onnx", small_model(
        [helper.make_node("HardSigmoid", ["X"], ["Y"], name="my_hard_sigmoid")]).SerializeToString())

    # Nodes without a (first) output: the parser of the text syntax cannot
    # write these.
    write("no_output.onnx", small_model(
        [helper.make_node("Dropout", ["X"], [], name="drop")]).SerializeToString())
    x3 = helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 2, 3])
    w = helper.make_tensor_value_info("W", TensorProto.FLOAT, [3, 9])
    y3 = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 2, 3])
    attention = helper.make_model(
        helper.make_graph([helper.make_node("Attention", ["X", "W"], ["", "present"],
                                            domain="com.microsoft", num_heads=1)],
                          "g", [x3, w], [y3]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
        producer_name="make_inputs.py")
    attention.ir_version = 8
    write("empty_output.onnx", attention.SerializeToString())

    # [2, 4] float weights (32 bytes) stored outside the model.
    weight_user = [helper.make_node("Add", ["X", "W"], ["Y"], name="add_w")]
    write("external_missing.onnx", small_model(
        weight_user, [external_tensor("W", [2, 4], "external_missing.onnx.data")])
        .SerializeToString())
    write("external_short.onnx", small_model(
        weight_user, [external_tensor("W", [2, 4], "external_short.onnx.data", offset=8)])
        .SerializeToString())
    write("external_short.onnx.data", bytes(range(24)))  # needs 8 + 32 bytes
    write("external_ok.onnx", small_model(
        weight_user, [external_tensor("W", [2, 4], "external_ok.onnx.data", offset=4,
                                      length=32)]).SerializeToString())
    write("external_ok.onnx.data", b"\0" * 36)

    # float16 and bfloat16 initializers with their bit patterns in int32_data (what
    # helper.make_tensor writes; exporters usually write raw_data).
    half = helper.make_tensor("H", TensorProto.FLOAT16, [2, 4],
                              [1.5, -2.25, 0.1, 65504, 0, -0.0, 6e-8, 3])
    bf16 = TensorProto()
    bf16.name, bf16.data_type = "B", TensorProto.BFLOAT16
    bf16.dims.extend([2, 4])
    # 1.5, -2.25, 0.099609375 (0.1 rounded), 7.51e37 (0x7E62), 0, 1.99e-38 (0x00D9), 7, -1
    bf16.int32_data.extend([0x3FC0, 0xC010, 0x3DCC, 0x7E62, 0x0000, 0x00D9, 0x40E0, 0xBF80])
    assert not half.raw_data and len(half.int32_data) == 8
    write("half_int32_data.onnx", small_model(
        [helper.make_node("Add", ["X", "H"], ["XH"], name="add_h"),
         helper.make_node("Add", ["XH", "B"], ["Y"], name="add_b")], [half, bf16])
        .SerializeToString())

    # PyTorch 2's exporter declares what each initializer is (ONNX IR 10 metadata_props,
    # which this onnx predates: written as raw fields 16 of TensorProto and 4 of
    # ValueInfoProto). `table` is a declared buffer added to the activations (the
    # heuristics would train it), `scale` a declared parameter that only multiplies
    # them (the rotary-table heuristic would take it for a buffer), `w` undeclared.
    write("declared_kinds.onnx", declared_kinds_model().SerializeToString())


KIND_KEY = "pkg.torch.export.graph_signature.InputSpec.kind"


def with_metadata(message, field, key, value):
    """`message` with one metadata_props entry appended as raw field `field`."""
    entry = onnx.StringStringEntryProto(key=key, value=value).SerializeToString()
    raw = bytes([field << 3 | 2]) if field < 16 else bytes([(field << 3 | 2) & 0x7F | 0x80,
                                                          (field << 3 | 2) >> 7])
    out = type(message)()
    out.ParseFromString(message.SerializeToString() + raw + bytes([len(entry)]) + entry)
    return out


def declared_kinds_model():
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 2])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 2])
    table = with_metadata(helper.make_tensor("table", TensorProto.FLOAT, [2, 2],
                                             [0.5, -1.0, 2.0, 0.25]), 16, KIND_KEY, "BUFFER")
    scale = helper.make_tensor("scale", TensorProto.FLOAT, [2, 2], [1.0, 2.0, 3.0, 4.0])
    w = helper.make_tensor("w", TensorProto.FLOAT, [2, 2], [1.0, 0.0, 0.0, 1.0])
    nodes = [helper.make_node("Mul", ["X", "scale"], ["scaled"], name="rot"),
             helper.make_node("Add", ["scaled", "table"], ["shifted"], name="shift"),
             helper.make_node("MatMul", ["shifted", "w"], ["Y"], name="proj")]
    scale_info = with_metadata(helper.make_tensor_value_info("scale", TensorProto.FLOAT, [2, 2]),
                               4, KIND_KEY, "PARAMETER")
    graph = helper.make_graph(nodes, "g", [x], [y], [table, scale, w], value_info=[scale_info])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="make_inputs.py")
    model.ir_version = 8
    return model


if __name__ == "__main__":
    main()
