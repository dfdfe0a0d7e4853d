#!/usr/bin/env python3
"""loom against llama.cpp on this CPU, in one command, with the machine's own limits beside them.

    build/venv/bin/python bench/peers/side_by_side.py [--work DIR] [--rounds 3] [--threads 1,2]

What it does, every step skipped when its output is already in --work:
  1. builds llama.cpp from the sources the llama-cpp-python sdist vendors
     (bench/engine/build_llamacpp.sh);
  2. makes the random-weight bench checkpoint (`loom_engine_bench make-model`, bf16 safetensors),
     gives it a small SentencePiece tokenizer (trained here on the repository's own license text:
     the vocabulary changes nothing a benchmark measures, but llama.cpp's converter wants one) and
     converts it with llama.cpp's own convert_hf_to_gguf.py to a BF16 and an F16 GGUF;
  3. measures the machine: the read-bandwidth probe (bench/common/memory_bandwidth.h, inside every
     loom run), the f32 FMA peak (matmul_bench's BM_FmaPeak) and, where the CPU has them, the
     vdpbf16ps and AMX tile peaks (BM_Bf16DotPeak, BM_AmxPeak);
  4. runs loom (bf16 safetensors) and llama.cpp (BF16 and F16 GGUF) alternately, --rounds times
     per thread count, the order flipping each round so neither engine always runs on a warmer or
     cooler machine: prefill of --prompt tokens and decode of --gen tokens at batch 1, and
     optionally decode at batch 8 (--batch8);
  5. writes one JSON with every raw figure, the probes and the CPU, and a Markdown table, to
     bench/results/peers/<machine kind>.{json,md}, where the kind names the vendor and the best
     instruction-set level (amd-avx2, amd-avx512-bf16, intel-amx, ...), and the core where two
     share a level (amd-avx512-bf16-zen5).

Targets (issue "CPU kernels at the limit of every x86 machine"): bf16 decode >= 1.5x llama.cpp's
BF16 decode and >= 90 % of the bandwidth roofline; bf16 prefill >= 1.2x llama.cpp's best float
prefill (BF16 or F16), at every thread count. The table says met or not for each.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGET_DECODE = 1.5
TARGET_PREFILL = 1.2
TARGET_ROOFLINE = 0.9


def log(message):
    print(f"[side-by-side {datetime.datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def run(cmd, **kwargs):
    log(" ".join(str(c) for c in cmd))
    return subprocess.run([str(c) for c in cmd], check=True, text=True, **kwargs)


def cpu_facts():
    info = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    first = info.split("\n\n")[0]
    fields = {}
    for line in first.splitlines():
        if ":" in line:
            key, value = line.split(":", 1)
            fields[key.strip()] = value.strip()
    flags = set(fields.get("flags", "").split())
    vendor = "amd" if "AMD" in fields.get("vendor_id", "") else (
        "intel" if "Intel" in fields.get("vendor_id", "") else "other")
    if "amx_tile" in flags and "amx_bf16" in flags:
        isa = "amx"
    elif "avx512_bf16" in flags:
        isa = "avx512-bf16"
    elif "avx512f" in flags:
        isa = "avx512"
    elif "avx2" in flags:
        isa = "avx2"
    else:
        isa = "scalar"
    interesting = sorted(flags & {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni",
                                  "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16",
                                  "amx_int8"})
    return {
        "model_name": fields.get("model name", "?"),
        "vendor": vendor,
        "family": fields.get("cpu family"),
        "model": fields.get("model"),
        "logical_cpus": os.cpu_count(),
        "flags": interesting,
        "isa": isa,
        "kind": f"{vendor}-{isa}{microarchitecture_suffix(vendor, fields.get('cpu family'))}",
    }


def microarchitecture_suffix(vendor, family):
    """Tells apart parts that share a vendor and an instruction-set level but not a core: AMD
    family 26 (Zen 5, full-width 512-bit units) has the flags of family 25's Zen 4. The kinds seen
    before Zen 5 keep their names."""
    try:
        family = int(family)
    except (TypeError, ValueError):
        return ""
    return "-zen5" if vendor == "amd" and family == 26 else ""


def train_tokenizer(ckpt, python):
    """A 512-piece SentencePiece model with byte fallback, trained on text the repository ships."""
    target = ckpt / "tokenizer.model"
    if target.exists():
        return
    corpus = ckpt / "tokenizer-corpus.txt"
    texts = sorted((ROOT / "tests/golden/kv_text").glob("*.txt")) or [ROOT / "README.md"]
    corpus.write_text("\n".join(t.read_text(encoding="utf-8", errors="replace") for t in texts),
                      encoding="utf-8")
    script = (
        "import sentencepiece as spm, sys\n"
        "spm.SentencePieceTrainer.train(input=sys.argv[1], model_prefix=sys.argv[2],\n"
        "    vocab_size=512, model_type='bpe', byte_fallback=True, character_coverage=1.0,\n"
        "    bos_id=1, eos_id=2, unk_id=0, pad_id=-1, minloglevel=2)\n")
    run([python, "-c", script, corpus, ckpt / "tokenizer"])
    (ckpt / "tokenizer.vocab").unlink(missing_ok=True)
    corpus.unlink()


def convert(src, ckpt, outtype, out, python):
    if out.exists():
        return
    env = dict(os.environ, PYTHONPATH=str(src / "gguf-py"))
    run([python, src / "convert_hf_to_gguf.py", ckpt, "--outtype", outtype, "--outfile", out],
        env=env, stdout=subprocess.DEVNULL)


def compute_peaks(matmul_bench):
    """Best GFLOP/s per thread count of the f32 FMA and, where the CPU has them, the vdpbf16ps and
    AMX TDPBF16PS chains."""
    out = run([matmul_bench, "--benchmark_filter=BM_FmaPeak|BM_Bf16DotPeak|BM_AmxPeak",
               "--benchmark_format=json", "--benchmark_repetitions=3"], capture_output=True).stdout
    peaks = {"fma": {}, "bf16_dot": {}, "amx": {}}
    kinds = {"BM_Bf16DotPeak": "bf16_dot", "BM_AmxPeak": "amx", "BM_FmaPeak": "fma"}
    for b in json.loads(out)["benchmarks"]:
        if b.get("run_type") == "aggregate" or b.get("error_occurred"):
            continue
        kind = kinds[b["name"].split("/")[0]]
        threads = int(b["name"].split("/")[1])
        peaks[kind][threads] = max(peaks[kind].get(threads, 0), b.get("GFLOP/s", 0))
    return peaks


def loom_round(loom_bench, ckpt, threads, args, batch, fast_bf16=False):
    out = args.work / f"loom-t{threads}-b{batch}{'-fast' if fast_bf16 else ''}.json"
    prompt = args.prompt if batch == 1 else 64
    extra = ["--fast-bf16-matmul"] if fast_bf16 else []
    run([loom_bench, "run", "--model", ckpt, "--threads", threads, "--batch", batch,
         "--prompt-len", prompt, "--gen-len", args.gen, "--repeat", 1, "--out", out, *extra],
        stdout=subprocess.DEVNULL)
    doc = json.loads(out.read_text(encoding="utf-8"))
    row = doc["results"][0]
    bw = doc.get("memory_bandwidth", {}).get(f"{threads}_threads", {})
    return {
        "prefill_tokens_per_s": row["prefill_tokens_per_s"],
        "decode_tokens_per_s": row["decode_tokens_per_s"],
        "decode_bytes_per_step": row["decode_bytes_per_step"],
        "bandwidth_gb_per_s": bw.get("best_gb_per_s", 0),
        "bandwidth_probe": bw,
        "commit": doc.get("commit") or doc.get("machine", {}).get("commit"),
    }


def llama_round(bin_dir, gguf, threads, args):
    out = run([bin_dir / "llama-bench", "-m", gguf, "-p", args.prompt, "-n", args.gen, "-t",
               threads, "-r", 1, "-o", "json"], capture_output=True).stdout
    rows = json.loads(out)
    prefill = next(r["avg_ts"] for r in rows if r["n_gen"] == 0)
    decode = next(r["avg_ts"] for r in rows if r["n_prompt"] == 0)
    return {"prefill_tokens_per_s": prefill, "decode_tokens_per_s": decode,
            "build": rows[0].get("build_commit")}


def llama_batch8(bin_dir, gguf, threads, args):
    out = run([bin_dir / "llama-batched-bench", "-m", gguf, "-c", 4096, "-b", 2048, "-ub", 512,
               "-npp", 64, "-ntg", args.gen, "-npl", 8, "-t", threads, "--output-format", "jsonl"],
              capture_output=True).stdout
    for line in out.splitlines():
        if line.strip().startswith("{"):
            row = json.loads(line)
            if row.get("pl") == 8:
                return {"decode_tokens_per_s": row["speed_tg"]}
    return {"decode_tokens_per_s": 0}


def layer_matmul_params(ckpt):
    """Weights of every decoder layer's matrices: what one prompt token multiplies (the LM head
    runs for the last prompt token only, in both engines)."""
    c = json.loads((ckpt / "config.json").read_text(encoding="utf-8"))
    hidden, inter = c["hidden_size"], c["intermediate_size"]
    head_dim = c.get("head_dim") or hidden // c["num_attention_heads"]
    q_dim = c["num_attention_heads"] * head_dim
    kv_dim = c.get("num_key_value_heads", c["num_attention_heads"]) * head_dim
    per_layer = hidden * (q_dim + 2 * kv_dim) + q_dim * hidden + 3 * hidden * inter
    return per_layer * c["num_hidden_layers"]


def summarize(samples):
    return {"best": max(samples), "median": statistics.median(samples), "all": samples}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=ROOT / "build/peers",
                        help="cache of the llama.cpp build, checkpoint and GGUF files")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--gen", type=int, default=64)
    parser.add_argument("--shape", default="llama-1.1b")
    parser.add_argument("--batch8", action="store_true", help="also decode at batch 8")
    parser.add_argument("--fast-bf16", choices=("auto", "on", "off"), default="auto",
                        help="also run loom with bf16-rounded prefill activations (auto: where "
                        "the CPU has bf16 arithmetic)")
    parser.add_argument("--llama-cpp-python", default="0.3.36", help="sdist version")
    parser.add_argument("--build", type=Path, default=ROOT / "build/cpu-release")
    parser.add_argument("--results", type=Path, default=ROOT / "bench/results/peers")
    args = parser.parse_args()
    args.work = args.work.resolve()
    args.work.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    loom_bench = args.build / "bench/loom_engine_bench"
    matmul_bench = args.build / "bench/matmul_bench"
    for binary in (loom_bench, matmul_bench):
        if not binary.exists():
            sys.exit(f"{binary} is missing: build the cpu-release preset first")
    threads = [int(t) for t in args.threads.split(",")]
    if subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode:
        sys.exit("llama.cpp's GGUF converter needs torch in this venv: "
                 "run deploy/install-deps.sh --golden")

    bin_dir = Path(run(["bash", ROOT / "bench/engine/build_llamacpp.sh", args.work,
                        args.llama_cpp_python], capture_output=True).stdout.strip().splitlines()[-1])
    src = bin_dir.parent.parent
    ckpt = args.work / f"ckpt-{args.shape}"
    if not (ckpt / "config.json").exists():
        run([loom_bench, "make-model", "--shape", args.shape, "--dtype", "bf16", "--out", ckpt])
    train_tokenizer(ckpt, python)
    ggufs = {fmt: args.work / f"{args.shape}-{fmt}.gguf" for fmt in ("bf16", "f16")}
    for fmt, path in ggufs.items():
        convert(src, ckpt, fmt, path, python)

    cpu = cpu_facts()
    log(f"machine kind {cpu['kind']}: {cpu['model_name']}")
    all_peaks = compute_peaks(matmul_bench)
    peaks = all_peaks["fma"]
    # Where the CPU has bf16 arithmetic (AVX512-BF16, AMX), loom also runs with its prefill
    # activations rounded to bf16 (--fast-bf16-matmul), as llama.cpp's BF16 path rounds them.
    fast = cpu["isa"] in ("avx512-bf16", "amx") if args.fast_bf16 == "auto" else (
        args.fast_bf16 == "on")
    raw = {t: {"loom": [], "loom fast-bf16": [], "llama.cpp bf16": [], "llama.cpp f16": []}
           for t in threads}
    batch8 = {t: {"loom": [], "llama.cpp bf16": []} for t in threads} if args.batch8 else {}
    llama_build = None
    for r in range(args.rounds):
        for t in threads:
            loom_first = r % 2 == 0
            steps = ["loom", "llama"] if loom_first else ["llama", "loom"]
            for step in steps:
                if step == "loom":
                    raw[t]["loom"].append(loom_round(loom_bench, ckpt, t, args, 1))
                    if fast:
                        raw[t]["loom fast-bf16"].append(
                            loom_round(loom_bench, ckpt, t, args, 1, fast_bf16=True))
                    if args.batch8:
                        batch8[t]["loom"].append(loom_round(loom_bench, ckpt, t, args, 8))
                else:
                    for fmt in ("bf16", "f16"):
                        one = llama_round(bin_dir, ggufs[fmt], t, args)
                        llama_build = one.pop("build", llama_build)
                        raw[t][f"llama.cpp {fmt}"].append(one)
                    if args.batch8:
                        batch8[t]["llama.cpp bf16"].append(llama_batch8(bin_dir, ggufs["bf16"], t, args))

    summary = {}
    for t in threads:
        loom = raw[t]["loom"]
        decode_bytes = loom[0]["decode_bytes_per_step"]
        roof_bw = max(x["bandwidth_gb_per_s"] for x in loom)
        s = {
            "loom_prefill": summarize([x["prefill_tokens_per_s"] for x in loom]),
            "loom_decode": summarize([x["decode_tokens_per_s"] for x in loom]),
            "llamacpp_bf16_prefill": summarize([x["prefill_tokens_per_s"] for x in raw[t]["llama.cpp bf16"]]),
            "llamacpp_bf16_decode": summarize([x["decode_tokens_per_s"] for x in raw[t]["llama.cpp bf16"]]),
            "llamacpp_f16_prefill": summarize([x["prefill_tokens_per_s"] for x in raw[t]["llama.cpp f16"]]),
            "llamacpp_f16_decode": summarize([x["decode_tokens_per_s"] for x in raw[t]["llama.cpp f16"]]),
            "bandwidth_roofline_gb_per_s": roof_bw,
            "decode_roofline_tokens_per_s": roof_bw * 1e9 / decode_bytes,
            "fma_peak_gflop_per_s": peaks.get(t, 0),
        }
        if all_peaks["amx"].get(t):
            s["amx_peak_gflop_per_s"] = all_peaks["amx"][t]
        params_flops = 2 * layer_matmul_params(ckpt)
        if raw[t]["loom fast-bf16"]:
            s["loom_fast_bf16_prefill"] = summarize(
                [x["prefill_tokens_per_s"] for x in raw[t]["loom fast-bf16"]])
            s["loom_fast_bf16_decode"] = summarize(
                [x["decode_tokens_per_s"] for x in raw[t]["loom fast-bf16"]])
            s["bf16_dot_peak_gflop_per_s"] = all_peaks["bf16_dot"].get(t, 0)
        best_peer_prefill = max(s["llamacpp_bf16_prefill"]["best"], s["llamacpp_f16_prefill"]["best"])
        best_loom_prefill = max(s["loom_prefill"]["best"],
                                s.get("loom_fast_bf16_prefill", {}).get("best", 0))
        # llama.cpp's BF16 path rounds activations to bf16, as loom's --fast-bf16-matmul does: the
        # ratios take loom's better figure of its two settings.
        best_loom_decode = max(s["loom_decode"]["best"],
                               s.get("loom_fast_bf16_decode", {}).get("best", 0))
        s["ratio_decode_vs_llamacpp_bf16"] = best_loom_decode / s["llamacpp_bf16_decode"]["best"]
        s["ratio_prefill_vs_llamacpp_best_float"] = best_loom_prefill / best_peer_prefill
        s["loom_decode_fraction_of_roofline"] = best_loom_decode / s["decode_roofline_tokens_per_s"]
        if s.get("bf16_dot_peak_gflop_per_s"):
            s["loom_fast_bf16_prefill_fraction_of_bf16_dot_peak"] = (
                s["loom_fast_bf16_prefill"]["best"] * params_flops / 1e9 / s["bf16_dot_peak_gflop_per_s"])
        if s.get("amx_peak_gflop_per_s"):
            # loom's prefill on AMX runs the tiles: its useful FLOPs against their peak (the
            # default precision issues three tile products per weight tile, --fast-bf16-matmul one).
            for key in ("loom_prefill", "loom_fast_bf16_prefill"):
                if key in s:
                    s[f"{key}_fraction_of_amx_peak"] = (
                        s[key]["best"] * params_flops / 1e9 / s["amx_peak_gflop_per_s"])
        if peaks.get(t):
            s["loom_prefill_fraction_of_fma_peak"] = (
                s["loom_prefill"]["best"] * params_flops / 1e9 / peaks[t])
            s["llamacpp_best_prefill_fraction_of_fma_peak"] = best_peer_prefill * params_flops / 1e9 / peaks[t]
        s["targets"] = {
            "decode_1.5x_llamacpp_bf16": s["ratio_decode_vs_llamacpp_bf16"] >= TARGET_DECODE,
            "decode_90pct_roofline": s["loom_decode_fraction_of_roofline"] >= TARGET_ROOFLINE,
            "prefill_1.2x_llamacpp_best_float": s["ratio_prefill_vs_llamacpp_best_float"] >= TARGET_PREFILL,
        }
        if args.batch8:
            s["loom_decode_batch8"] = summarize([x["decode_tokens_per_s"] for x in batch8[t]["loom"]])
            s["llamacpp_bf16_decode_batch8"] = summarize(
                [x["decode_tokens_per_s"] for x in batch8[t]["llama.cpp bf16"]])
        summary[str(t)] = s

    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], text=True,
                            capture_output=True).stdout.strip()
    # Uncommitted results or other text does not change what ran: only the rest marks the run.
    dirty = subprocess.run(["git", "-C", ROOT, "diff", "--quiet", "HEAD", "--", ".",
                            ":(exclude)bench/results", ":(exclude)*.md"]).returncode != 0
    doc = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "loom_commit": commit + ("-dirty" if dirty else ""),
        "llamacpp": {"sdist": f"llama-cpp-python=={args.llama_cpp_python}", "build": llama_build},
        "cpu": cpu,
        "settings": {"shape": args.shape, "rounds": args.rounds, "threads": threads,
                     "prompt": args.prompt, "gen": args.gen, "batch8": args.batch8,
                     "loom_weights": "bf16 safetensors", "llamacpp_weights": "BF16 and F16 GGUF "
                     "converted by llama.cpp's convert_hf_to_gguf.py"},
        "fma_peak_gflop_per_s": peaks,
        "bf16_dot_peak_gflop_per_s": all_peaks["bf16_dot"],
        "amx_peak_gflop_per_s": all_peaks["amx"],
        "summary": summary,
        "raw": {str(t): raw[t] for t in threads},
        "raw_batch8": {str(t): batch8[t] for t in batch8},
    }
    args.results.mkdir(parents=True, exist_ok=True)
    json_path = args.results / f"{cpu['kind']}.json"
    json_path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    md_path = args.results / f"{cpu['kind']}.md"
    md_path.write_text(markdown(doc), encoding="utf-8")
    print(md_path.read_text(encoding="utf-8"))
    log(f"wrote {json_path} and {md_path}")


def markdown(doc):
    cpu, st = doc["cpu"], doc["settings"]
    lines = [
        f"# loom and llama.cpp side by side: {cpu['kind']}",
        "",
        f"- **CPU:** {cpu['model_name']} (family {cpu['family']}, model {cpu['model']}), "
        f"{cpu['logical_cpus']} logical CPUs, flags {' '.join(cpu['flags'])}",
        f"- **Date:** {doc['date']}; **loom** `{doc['loom_commit']}`; **llama.cpp** "
        f"{doc['llamacpp']['sdist']} (build {doc['llamacpp']['build']})",
        f"- **Model:** random-weight `{st['shape']}` shape; loom reads the bf16 safetensors, "
        "llama.cpp the BF16 and F16 GGUF its own converter made from them.",
        f"- **Runs:** {st['rounds']} rounds per thread count, alternating the engines (order flipped "
        f"each round); prefill {st['prompt']} tokens, decode {st['gen']} tokens at batch 1. "
        "Cells: best (median).",
        "- **Command:** `build/venv/bin/python bench/peers/side_by_side.py "
        f"--shape {st['shape']} --prompt {st['prompt']} --gen {st['gen']} "
        f"--rounds {st['rounds']} --threads {','.join(map(str, st['threads']))}"
        f"{' --batch8' if st['batch8'] else ''}`",
        "",
        "| threads | loom prefill | llama.cpp BF16 prefill | llama.cpp F16 prefill | prefill ratio "
        "(target 1.2x) | loom decode | llama.cpp BF16 decode | llama.cpp F16 decode | decode ratio "
        "(target 1.5x) | roofline | loom / roofline (target 90 %) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    cell = lambda s: f"{s['best']:.1f} ({s['median']:.1f})"
    for t, s in doc["summary"].items():
        lines.append(
            f"| {t} | {cell(s['loom_prefill'])} | {cell(s['llamacpp_bf16_prefill'])} | "
            f"{cell(s['llamacpp_f16_prefill'])} | {s['ratio_prefill_vs_llamacpp_best_float']:.2f}x | "
            f"{cell(s['loom_decode'])} | {cell(s['llamacpp_bf16_decode'])} | "
            f"{cell(s['llamacpp_f16_decode'])} | {s['ratio_decode_vs_llamacpp_bf16']:.2f}x | "
            f"{s['decode_roofline_tokens_per_s']:.1f} tok/s ({s['bandwidth_roofline_gb_per_s']:.1f} GB/s) | "
            f"{100 * s['loom_decode_fraction_of_roofline']:.0f} % |")
    lines += ["", "| threads | f32 FMA peak | loom prefill / peak | llama.cpp best prefill / peak | "
              "targets met |", "|---:|---:|---:|---:|---|"]
    for t, s in doc["summary"].items():
        met = ", ".join(f"{k}: {'yes' if v else 'no'}" for k, v in s["targets"].items())
        lines.append(
            f"| {t} | {s['fma_peak_gflop_per_s']:.0f} GFLOP/s | "
            f"{100 * s.get('loom_prefill_fraction_of_fma_peak', 0):.0f} % | "
            f"{100 * s.get('llamacpp_best_prefill_fraction_of_fma_peak', 0):.0f} % | {met} |")
    if any("loom_fast_bf16_prefill" in s for s in doc["summary"].values()):
        lines += ["", "| threads | loom prefill, bf16-rounded activations | vdpbf16ps peak | "
                  "fraction of that peak | loom decode, bf16-rounded activations |",
                  "|---:|---:|---:|---:|---:|"]
        for t, s in doc["summary"].items():
            if "loom_fast_bf16_prefill" in s:
                decode = cell(s["loom_fast_bf16_decode"]) if "loom_fast_bf16_decode" in s else "-"
                lines.append(
                    f"| {t} | {cell(s['loom_fast_bf16_prefill'])} | "
                    f"{s.get('bf16_dot_peak_gflop_per_s', 0):.0f} GFLOP/s | "
                    f"{100 * s.get('loom_fast_bf16_prefill_fraction_of_bf16_dot_peak', 0):.0f} % | "
                    f"{decode} |")
        lines.append("")
        lines.append("The ratios and the roofline fraction above take loom's better figure of its "
                     "two settings (`--fast-bf16-matmul` rounds activations to bf16, as llama.cpp's "
                     "BF16 path does).")
    if any("amx_peak_gflop_per_s" in s for s in doc["summary"].values()):
        lines += ["", "| threads | AMX TDPBF16PS peak | loom prefill / AMX peak | loom prefill, "
                  "bf16-rounded activations / AMX peak |", "|---:|---:|---:|---:|"]
        for t, s in doc["summary"].items():
            if "amx_peak_gflop_per_s" in s:
                lines.append(
                    f"| {t} | {s['amx_peak_gflop_per_s']:.0f} GFLOP/s | "
                    f"{100 * s.get('loom_prefill_fraction_of_amx_peak', 0):.0f} % | "
                    f"{100 * s.get('loom_fast_bf16_prefill_fraction_of_amx_peak', 0):.0f} % |")
        lines.append("")
        lines.append("On AMX, loom's prefill of bf16 weights runs on the tiles (three tile products "
                     "per weight tile at the default f32-accurate precision, one with bf16-rounded "
                     "activations): the AMX peak is its roof, not the FMA or vdpbf16ps peak.")
    if st["batch8"]:
        lines += ["", "| threads | loom decode, batch 8 | llama.cpp BF16 decode, batch 8 |",
                  "|---:|---:|---:|"]
        for t, s in doc["summary"].items():
            lines.append(f"| {t} | {cell(s['loom_decode_batch8'])} | "
                         f"{cell(s['llamacpp_bf16_decode_batch8'])} |")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
