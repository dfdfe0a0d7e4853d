#!/usr/bin/env python3
"""Live-migration downtime against sequence length, and what a migration costs the requests
that stay behind.

Two loomd instances on loopback ports (one thread each). For every context length, a request
with a prompt of that many tokens streams on instance A while a neighbour request decodes beside
it; after the measured request's 40th token, A migrates it to B (Instance.MigrateOut). Reported
per length (median over --repeats):
  - downtime_ms: the source's measure, from the freeze to the destination's first output;
  - client_gap_ms: the longest pause between two tokens the client saw while the move ran, and
    itl_ms, the request's usual inter-token time on the source just before (the decode step at
    that context: a move costs about one step more than usual);
  - stages and blocks copied;
  - neighbour_itl_ratio: the neighbour's median inter-token time while the migration ran over
    its median in the 0.6 s before, when both requests decoded together (1.0 = no slowdown);
  - neighbour_max_gap_ms: the neighbour's longest inter-token time while the migration ran (a
    long step of the source's loop, which the median hides).

  python3 bench/cluster/migration_downtime.py --loomd build/cpu-release/bin/loomd \
      --model build/models/SmolLM2-135M-Instruct.Q4_1.gguf --lengths 256,1024,2048,4096 \
      --out bench/results/cluster_migration.json
"""
import argparse
import json
import statistics
import threading
import time

import grpc

import cluster_lib as lib


def measure(a, b, length, args):
    pb, pb_grpc = lib.stubs()
    prompt = [100 + (i * 7) % 4000 for i in range(length)]
    neighbour = {}
    started = threading.Event()

    def run_neighbour():
        # Long enough to outlast the measured request's prompt, its first tokens and the move.
        tokens = args.neighbour_tokens or 400 + length // 3
        neighbour.update(lib.timed_stream(a.port, "Tell me a long story.", tokens,
                                          on_chunk=lambda i: i == 3 and started.set()))

    nt = threading.Thread(target=run_neighbour)
    nt.start()
    started.wait(120)
    window = {}
    result = {}

    def migrate():
        stub = pb_grpc.InstanceStub(grpc.insecure_channel(f"127.0.0.1:{a.grpc_port}"))
        window["start"] = time.perf_counter()
        reply = stub.MigrateOut(pb.MigrateOutRequest(destination_address=f"127.0.0.1:{b.grpc_port}",
                                                     max_requests=1, longest_first=True),
                                metadata=[("authorization", f"Bearer {lib.KEY}")], timeout=300)
        window["end"] = time.perf_counter()
        result["reply"] = reply

    mover = threading.Thread(target=migrate)

    def on_chunk(i):
        # From another thread: the client keeps reading its stream while the move runs.
        if i == args.move_after:
            mover.start()

    # MigrateOut moves the running request holding the most blocks: the measured one, whose
    # prompt is longer than anything the neighbour decodes meanwhile.
    measured = lib.timed_stream(a.port, prompt, args.tokens, on_chunk=on_chunk)
    if mover.is_alive() or mover.ident is not None:
        mover.join()
    nt.join()
    reply = result.get("reply")
    r = reply.results[0] if reply is not None and reply.results else None
    before = [g for t, g in zip(neighbour["times"][1:], neighbour["gaps"])
              if window.get("start", 0) - 0.6 <= t < window.get("start", 0)]
    during = [g for t, g in zip(neighbour["times"][1:], neighbour["gaps"])
              if window.get("start", 0) <= t <= window.get("end", 0)]
    return {
        "length": length,
        "outcome": r.outcome if r else "none",
        "moved_request": r.request_id if r else 0,
        "downtime_ms": r.downtime_ms if r else float("nan"),
        # Its parts (see MigrationResult in proto/loom/v1/cluster.proto).
        "export_step_ms": r.export_step_ms if r else float("nan"),
        "resume_ms": r.resume_ms if r else float("nan"),
        "first_output_ms": r.first_output_ms if r else float("nan"),
        "stages": r.stages if r else 0,
        "blocks": r.blocks_copied if r else 0,
        # The measured request's usual inter-token time just before the move, on the source.
        "itl_ms": 1e3 * statistics.median(
            [g for t, g in zip(measured["times"][1:], measured["gaps"])
             if window.get("start", 0) - 0.6 <= t < window.get("start", 0)] or [float("nan")]),
        # The longest pause the client saw while the move ran (the freeze is in it).
        "client_gap_ms": 1e3 * max((g for t, g in zip(measured["times"][1:], measured["gaps"])
                                    if window.get("start", 0) <= t <= window.get("end", 0) + 1.0),
                                   default=float("nan")),
        "neighbour_itl_ratio": (statistics.median(during) / statistics.median(before)
                                if during and before else float("nan")),
        # The neighbour's longest pause while the move ran: a stall of the source's loop (one
        # long step) that the median above does not show.
        "neighbour_max_gap_ms": 1e3 * max(during, default=float("nan")),
        "migrate_call_ms": 1e3 * (window.get("end", 0) - window.get("start", 0)),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loomd", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--lengths", default="256,1024,2048,4096")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tokens", type=int, default=200, help="new tokens of the measured request")
    p.add_argument("--neighbour-tokens", type=int, default=0,
                   help="new tokens of the neighbour (0: 400 + length / 3)")
    p.add_argument("--move-after", type=int, default=40,
                   help="the measured request moves after this many of its tokens")
    p.add_argument("--threads", default="1")
    p.add_argument("--kv-cache-mb", default="512")
    p.add_argument("--out")
    p.add_argument("--logs", help="write the two instances' logs to LOGS-a.log and LOGS-b.log")
    args = p.parse_args()
    common = ["--threads", args.threads, "--kv-cache-mb", args.kv_cache_mb]
    log = (lambda side: f"{args.logs}-{side}.log") if args.logs else (lambda side: None)
    a = lib.start_instance(args.loomd, args.model, *common, log=log("a"))
    b = lib.start_instance(args.loomd, args.model, *common, log=log("b"))
    rows = []
    try:
        for length in (int(x) for x in args.lengths.split(",")):
            runs = [measure(a, b, length, args) for _ in range(args.repeats)]
            ok = [r for r in runs if r["outcome"] == "committed"]
            row = {"length": length, "runs": runs, "committed": len(ok)}
            for key in ("downtime_ms", "export_step_ms", "resume_ms", "first_output_ms",
                        "client_gap_ms", "itl_ms", "neighbour_itl_ratio", "neighbour_max_gap_ms",
                        "blocks", "stages"):
                row[key] = statistics.median(r[key] for r in ok) if ok else float("nan")
            rows.append(row)
            print(f"length {length:6d}: downtime {row['downtime_ms']:7.1f} ms, client gap "
                  f"{row['client_gap_ms']:7.1f} ms (ITL {row['itl_ms']:5.1f} ms), {row['blocks']} "
                  f"blocks in {row['stages']} "
                  f"stages, neighbour ITL x{row['neighbour_itl_ratio']:.2f}, its longest gap "
                  f"{row['neighbour_max_gap_ms']:.1f} ms ({len(ok)}/{len(runs)} committed)",
                  flush=True)
    finally:
        a.stop()
        b.stop()
    report = {"machine": lib.machine(), "settings": lib.settings(args), "rows": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
