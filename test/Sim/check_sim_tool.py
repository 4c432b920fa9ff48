#!/usr/bin/env python3
"""pipemesh-sim end to end: compile a tiny fixture plan, simulate it, check the outputs.

    check_sim_tool.py PIPEMESH_OPT PIPEMESH_SIM MODELS_DIR WORK_DIR

Checks the --json keys the schedule search and the benchmarks read, that the trace
and the SVG are written, that the simulated peak memory is the plan's liveness peak
(persistent buffers + the most activation bytes live at once, never above the planned
arena), and that bad inputs are clear errors with a non-zero exit.
"""
import json
import math
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "runtime", "tools"))
import make_test_plan as mtp  # noqa: E402  (the tests' statement of the replica rules)


def run(cmd, ok=True):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if ok and p.returncode != 0:
        sys.exit(f"FAILED ({p.returncode}): {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p


def manifest(path):
    with open(path, "rb") as f:
        head = f.read(40)
        (length,) = struct.unpack("<Q", head[16:24])
        return json.loads(f.read(length))


def liveness_peaks(m):
    """The planner's liveness rule (lib/Plan layout()), independently of lib/Sim."""
    persistent_kinds = {"param", "grad", "adam_m", "adam_v", "constant"}
    align = lambda b: (b + 63) // 64 * 64
    out = []
    for r in m["ranks"]:
        bufs = {b["id"]: b for b in r["buffers"]}

        def root(i):
            while "alias_of" in bufs[i]:
                i = bufs[i]["alias_of"]
            return i

        first, last, sent, done_at, done = {}, {}, [], [], 0
        for k, ins in enumerate(r["program"]):
            for field in ("in", "out", "bufs"):
                for i in ins.get(field, []):
                    x = root(i)
                    first[x] = min(first.get(x, k), k)
                    last[x] = max(last.get(x, -1), k)
                    if field == "in" and ins["op"] == "send":
                        sent.append(x)
                        done_at.append(-1)
            if ins["op"] == "wait_sends":  # completes all sends but the `keep` latest
                upto = max(0, len(sent) - ins.get("keep", 0))
                while done < upto:
                    done_at[done] = k
                    done += 1
        for x, k in zip(sent, done_at):
            last[x] = max(last[x], k)
        persistent = sum(align(b["bytes"]) for b in r["buffers"]
                         if "alias_of" not in b and b["kind"] in persistent_kinds)
        delta = {}
        for i, b in bufs.items():
            if "alias_of" in b or b["kind"] in persistent_kinds:
                continue
            f = first.get(i, 0)
            l = max(last.get(i, -1), f)
            delta[f] = delta.get(f, 0) + align(b["bytes"])
            delta[l + 1] = delta.get(l + 1, 0) - align(b["bytes"])
        live = peak = 0
        for t in sorted(delta):
            live += delta[t]
            peak = max(peak, live)
        out.append((r["rank"], persistent + peak, r["arena_bytes"]))
    return sorted(out)


def main():
    opt, sim, models, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    plan = os.path.join(work, "tiny.plan")
    run([opt, os.path.join(models, "fixtures", "gpt2_tiny_op17.onnx"),
         "--pipemesh-compile=batch=2 seq=16 pp=2 microbatches=4", "-o", plan])
    out_json = os.path.join(work, "tiny.sim.json")
    trace = os.path.join(work, "tiny.trace.json")
    svg = os.path.join(work, "tiny.svg")
    p = run([sim, plan, "--cluster", "cpu", "--json", out_json, "--trace", trace, "--svg", svg])
    assert "step" in p.stdout and "rank" in p.stdout, p.stdout

    s = json.load(open(out_json))
    for key in ("step_time_s", "tokens_per_s", "bubble_frac", "exposed_comm_frac",
                "all_device_idle_frac", "recompute_frac", "peak_mem_bytes"):
        assert key in s, f"--json lacks {key}: {sorted(s)}"
    assert s["step_time_s"] > 0 and s["tokens_per_s"] > 0, s
    assert s["tokens_per_step"] == 2 * 16 * 4, s["tokens_per_step"]
    for key in ("bubble_frac", "exposed_comm_frac", "all_device_idle_frac", "recompute_frac"):
        assert 0.0 <= s[key] <= 1.0, (key, s[key])
    assert s["recompute_frac"] == 0.0
    assert len(s["peak_mem_bytes"]) == 2, s["peak_mem_bytes"]
    # MFU: the plan's model FLOPs per step over the step time, the ranks and the device's
    # peak at its compute precision (the "cpu" preset's), as the summary line prints it.
    with open(plan, "rb") as f:
        head = f.read(40)
        flops = json.loads(f.read(struct.unpack("<Q", head[16:24])[0]))["model"]["flops_per_step"]
    cluster = json.loads(run([sim, "--cluster", "cpu", "--print-cluster"]).stdout)
    per_rank = flops / s["step_time_s"] / s["world_size"]
    assert abs(s["model_tflops_per_rank"] * 1e12 / per_rank - 1) < 1e-9, (s, per_rank)
    device = cluster["device"]
    peak = device["peak_flops_bf16" if device["precision"] == "bf16" else "peak_flops_fp32"]
    assert 0 < s["mfu"] < 1 and abs(s["mfu"] * peak / per_rank - 1) < 1e-9, (s["mfu"], peak)
    assert f"MFU {100 * s['mfu']:.1f}%" in p.stdout, p.stdout
    for r in s["ranks"]:
        total = r["compute_s"] + r["bubble_s"] + r["exposed_comm_s"]
        assert abs(total - s["step_time_s"]) <= 1e-9 * max(1.0, s["step_time_s"]), (r, total)
    # The floor: the busiest collective stream and the busiest compute, never above the step.
    assert s["collective_floor_s"] == max(r["collective_busy_s"] for r in s["ranks"]), s
    assert s["compute_max_s"] == max(r["compute_s"] for r in s["ranks"]), s
    assert s["floor_s"] == max(s["collective_floor_s"], s["compute_max_s"]) > 0, s
    assert s["floor_s"] <= s["step_time_s"] * (1 + 1e-9), s

    m = manifest(plan)
    for (rank, live_peak, arena), sim_peak in zip(liveness_peaks(m), s["peak_mem_bytes"]):
        assert sim_peak == live_peak, f"rank {rank}: simulated {sim_peak}, liveness {live_peak}"
        assert sim_peak <= arena, f"rank {rank}: peak {sim_peak} above the arena {arena}"

    t = json.load(open(trace))
    names = {e["args"]["name"] for e in t["traceEvents"] if e.get("ph") == "M"}
    assert {"rank 0", "rank 1", "compute", "p2p", "dp-collective"} <= names, names
    assert any(e.get("ph") == "X" and e["name"] == "0F0" for e in t["traceEvents"])
    assert open(svg).read().startswith("<svg")

    # A cluster file written by --print-cluster reads back.
    cfile = os.path.join(work, "c.json")
    p = run([sim, "--cluster", "a100-40g-100gbps", "--print-cluster"])
    open(cfile, "w").write(p.stdout)
    run([sim, plan, "--cluster", cfile, "--quiet"])

    # A calibrated attention row's per-row time: each attention (and gradient)
    # instruction of the rank adds row_s times its query rows, counted here from
    # the manifest (its first result's elements over the last dimension).
    rows = {"attention": 0, "attention_grad": 0}
    for ins in m["ranks"][0]["program"]:
        if ins["op"] in rows:
            shape = {b["id"]: b["shape"] for b in m["ranks"][0]["buffers"]}[ins["out"][0]]
            rows[ins["op"]] += math.prod(shape[:-1])
    assert rows["attention"] > 0 and rows["attention_grad"] > 0, rows
    per_op = {}
    for row_s in (0.0, 1e-6):
        kernels = {op: {"flop_rate": 1e10, "overhead_s": 1e-5, "row_s": row_s} for op in rows}
        cfile = os.path.join(work, f"rows{row_s}.json")
        json.dump({"device": {"preset": "cpu", "kernels": kernels},
                   "intra_node": {"gbps": 100}, "inter_node": {"gbps": 100}}, open(cfile, "w"))
        out = os.path.join(work, f"rows{row_s}.sim.json")
        run([sim, plan, "--cluster", cfile, "--per-op", "0", "--json", out, "--quiet"])
        per_op[row_s] = json.load(open(out))["per_op_s"]
    for op, n in rows.items():
        added = per_op[1e-6][op] - per_op[0.0][op]
        assert abs(added - 1e-6 * n) <= 1e-9 * max(1.0, added), (op, added, n)

    # --calibrate --quick (about 2 s) writes a cluster file whose attention rows
    # carry a flop rate and a time per query row, and the simulator takes it.
    cal = os.path.join(work, "cal.json")
    run([sim, "--calibrate", "--quick", "-o", cal])
    kernels = json.load(open(cal))["device"]["kernels"]
    for op in ("attention", "attention_grad"):
        row = kernels[op]
        assert row["flop_rate"] > 0 and row.get("row_s", 0) >= 0 and "bandwidth" not in row, row
    assert all(r.get("bandwidth", 0) > 0 for op, r in kernels.items()
               if not op.startswith("attention")), kernels
    run([sim, plan, "--cluster", cal, "--quiet"])

    p = run([sim, "--list-clusters"])
    for name in ("a100-40g-25gbps", "a100-40g-100gbps", "cpu"):
        assert name in p.stdout, p.stdout

    # Errors: clear message, exit status 1. A truncated plan (or one whose
    # header announces more than follows) is refused before anything past
    # the end is mapped (it was a segmentation fault).
    with open(plan, "rb") as f:
        whole = f.read()
    truncated = os.path.join(work, "truncated.plan")
    open(truncated, "wb").write(whole[:1000])
    overlong = os.path.join(work, "overlong.plan")
    open(overlong, "wb").write(whole[:16] + struct.pack("<Q", 1 << 63) + whole[24:])
    empty = os.path.join(work, "empty.plan")
    open(empty, "wb").close()
    # One flipped bit in the weights, or bytes appended: refused as pipemesh-run
    # and --print-plan refuse them (the checksum covers the whole body).
    damaged = os.path.join(work, "damaged.plan")
    open(damaged, "wb").write(whole[:-5] + bytes([whole[-5] ^ 0x40]) + whole[-4:])
    trailing = os.path.join(work, "trailing.plan")
    open(trailing, "wb").write(whole + b"\0\0\0\0")
    missing_dir = os.path.join(work, "no-such-dir")
    # The container checks are one reader's (PMeshPlanFormat), which
    # pipemesh-opt --print-plan uses too: the same refusal from both.
    wrong_version = os.path.join(work, "version9.plan")
    open(wrong_version, "wb").write(whole[:8] + struct.pack("<I", 9) + whole[12:])
    for path, text in ((truncated, "is truncated: the header announces"),
                       (empty, "is not a PipeMesh plan (0 bytes, shorter than the header)"),
                       (out_json, "is not a PipeMesh plan (bad magic)"),
                       (damaged, "is damaged: its checksum does not match the one in its header"),
                       (trailing, "has 4 bytes past the"),
                       (overlong, "is truncated: the header announces 9223372036854775808"),
                       (wrong_version, "format version 9, this %s reads version 3")):
        for tool in ("pipemesh-sim", "pipemesh-opt"):
            cmd = [sim, path] if tool == "pipemesh-sim" else [opt, "--print-plan", path]
            p = run(cmd, ok=False)
            expected = text % tool if "%s" in text else text
            assert p.returncode == 1 and expected in p.stderr, (cmd, p.returncode, p.stderr)
    for args, text in (([truncated], "is truncated: the header announces"),
                       ([empty], "is not a PipeMesh plan (0 bytes, shorter than the header)"),
                       ([damaged], "is damaged: its checksum does not match the one in its header"),
                       ([trailing], "has 4 bytes past the"),
                       # Outputs go through a temporary file beside the path: a
                       # missing directory is named, nothing is written.
                       ([plan, "--json", os.path.join(missing_dir, "o.json")],
                        f"cannot write '{missing_dir}/o.json': No such file or directory"),
                       (["--calibrate", "--quick", "-o", os.path.join(missing_dir, "c.json")],
                        f"cannot write '{missing_dir}/c.json': No such file or directory"),
                       ([overlong], "is truncated: the header announces 9223372036854775808"),
                       ([os.path.join(work, "missing.plan")], "cannot read plan"),
                       ([plan, "--cluster", "no-such-cluster"], "unknown cluster preset"),
                       ([out_json], "not a PipeMesh plan")):
        p = run([sim] + args, ok=False)
        assert p.returncode == 1 and text in p.stderr, (args, p.returncode, p.stderr)
    bad = os.path.join(work, "bad.json")
    open(bad, "w").write("{ not json")
    p = run([sim, plan, "--cluster", bad], ok=False)
    assert p.returncode == 1 and "invalid JSON" in p.stderr, p.stderr
    # With dp > 1 the compiler writes dp rank 0's program of each pipeline rank
    # (parallel.replicas_elided); the simulator builds the other replicas. The
    # same plan with every replica written out (docs/plan-format.md's rules,
    # applied here independently of the compiler and the runtime) simulates
    # to the same results.
    elided_plan = os.path.join(work, "dp2.plan")
    run([opt, os.path.join(models, "fixtures", "gpt2_tiny_op17.onnx"),
         "--pipemesh-compile=batch=2 seq=16 pp=2 dp=2 microbatches=4 zero=1", "-o", elided_plan])
    m = manifest(elided_plan)
    assert m["parallel"].get("replicas_elided") is True, m["parallel"]
    assert [r["rank"] for r in m["ranks"]] == [0, 2], [r["rank"] for r in m["ranks"]]
    m["ranks"] = [mtp.replica_entry(r, d) for r in m["ranks"] for d in range(2)]
    del m["parallel"]["replicas_elided"]
    with open(elided_plan, "rb") as f:
        head = bytes(f.read(40))
    def manifest_only(path, m):
        """A plan of manifest `m` and no weights (the simulator reads none), with
        its lengths and checksum set."""
        text = json.dumps(m).encode()
        with open(path, "wb") as f:
            f.write(head[:16] + struct.pack("<QQQ", len(text), 0, mtp.checksum64(text)) + text)
        return path
    full_plan = manifest_only(os.path.join(work, "dp2-full.plan"), m)
    # A malformed manifest: the loader names the JSON path and what is wrong.
    def broken(name, edit):
        bm = manifest(elided_plan)
        edit(bm)
        return manifest_only(os.path.join(work, name + ".plan"), bm)
    def set_program_entry(bm):
        bm["ranks"][0]["program"][3] = 5
    def dup_id(bm):
        bm["ranks"][0]["buffers"][1]["id"] = bm["ranks"][0]["buffers"][0]["id"]
    def bad_alias(bm):
        bm["ranks"][0]["buffers"][1]["alias_of"] = 99999
    def bad_in(bm):
        bm["ranks"][0]["program"][2]["in"] = [123456]
    for name, edit, text in (
            ("notobj", set_program_entry, "ranks[0].program[3]: expected an object"),
            ("nobufs", lambda bm: bm["ranks"][1].pop("buffers"), "ranks[1].buffers: missing"),
            ("dupid", dup_id, "ranks[0].buffers[1].id: duplicate buffer id"),
            ("alias", bad_alias, "ranks[0].buffers[1].alias_of: unknown buffer id"),
            ("badin", bad_in, "ranks[0].program[2].in: unknown buffer id"),
            ("version2", lambda bm: bm.update(version=2),
             "has plan format version 2 in its manifest, this pipemesh-sim reads 3"),
            ("noversion", lambda bm: bm.pop("version"),
             "has plan format version (none) in its manifest"),
            ("format", lambda bm: bm.update(format="other"), "the manifest is not a pipemesh-plan"),
            ("dpcoll", lambda bm: bm["parallel"].update(dp_collectives="hierarchial"),
             'parallel.dp_collectives must be "flat" or "hierarchical", got "hierarchial"'),
            ("dpcollint", lambda bm: bm["parallel"].update(dp_collectives=1),
             'parallel.dp_collectives must be "flat" or "hierarchical", got 1')):
        p = run([sim, broken(name, edit), "--cluster", "a100-40g-25gbps"], ok=False)
        assert p.returncode == 1 and text in p.stderr, (name, p.returncode, p.stderr)
        # The manifest's own checks are the same reader's in --print-plan
        # (plan::checkPlanManifest); the program checks are the simulator's.
        if name in ("version2", "noversion", "format", "dpcoll", "dpcollint"):
            p = run([opt, "--print-plan", broken(name, edit)], ok=False)
            want = text.replace("pipemesh-sim", "pipemesh-opt")
            assert p.returncode == 1 and want in p.stderr, (name, p.returncode, p.stderr)
    results = []
    for path in (full_plan, elided_plan):
        out = path + ".json"
        run([sim, path, "--cluster", "a100-40g-25gbps", "--json", out, "--quiet"])
        r = json.load(open(out))
        results.append({k: r[k] for k in ("step_time_s", "bubble_frac", "exposed_comm_frac",
                                          "all_device_idle_frac", "peak_mem_bytes")})
    assert results[0] == results[1], results

    # prefetch=auto: each depth emitted and simulated; the plan records what it tried,
    # and each recorded time is what pipemesh-sim gives the plan compiled with that depth.
    base = "batch=2 seq=16 dp=2 microbatches=4 zero=3 cluster=a100-40g-25gbps"
    auto_plan = os.path.join(work, "prefetch-auto.plan")
    run([opt, os.path.join(models, "fixtures", "gpt2_tiny_op17.onnx"),
         f"--pipemesh-compile={base} prefetch=auto", "-o", auto_plan])
    par = manifest(auto_plan)["parallel"]
    tried = par["prefetch_search"]["tried"]
    # Depths from 1 up, until one is over mem-limit or not 0.1% faster than the last.
    assert [t["prefetch"] for t in tried] == list(range(1, len(tried) + 1)), tried
    best, fastest, improving = 1, float("inf"), True
    for i, t in enumerate(tried):
        depth_plan = os.path.join(work, f"prefetch-{t['prefetch']}.plan")
        run([opt, os.path.join(models, "fixtures", "gpt2_tiny_op17.onnx"),
             f"--pipemesh-compile={base} prefetch={t['prefetch']}", "-o", depth_plan])
        out = depth_plan + ".json"
        run([sim, depth_plan, "--cluster", "a100-40g-25gbps", "--json", out, "--quiet"])
        step = json.load(open(out))["step_time_s"]
        assert abs(step - t["step_s"]) <= 1e-9 * step, (t, step)
        improving = step < fastest * 0.999
        if improving:
            best, fastest = t["prefetch"], step
        else:
            assert i == len(tried) - 1, ("searched past a depth that did not help", tried)
    assert len(tried) == 4 or not improving, ("stopped while improving", tried)
    assert par["prefetch"] == best, (par, best)
    print("pipemesh-sim checks passed")


if __name__ == "__main__":
    main()
