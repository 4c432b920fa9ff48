# Removes what --pmesh-partition adds (stage attributes, the module's stage
# count and layout), for test/Transforms/partition-equivalence.mlir.
s/ attributes \{pmesh\.layers_per_stage = array<i64[: 0-9,]*>, pmesh\.num_stages = [0-9]+ : i64\}//
s/pmesh\.layers_per_stage = array<i64[: 0-9,]*>, pmesh\.num_stages = [0-9]+ : i64, //
s/ \{pmesh\.stage = [0-9]+ : i64\}//
s/pmesh\.stage = [0-9]+ : i64, //
s/, pmesh\.stage = [0-9]+ : i64//
