// An instance's load as the cluster sees it (shared/ARCHITECTURE.md §6, Llumnix's freeness).
//
// Sign convention (the only one in loom): freeness is the number of free KV blocks per request
// of the current batch, after virtual demand. A block holds block_size tokens, so every running
// request can still decode about freeness * block_size steps before the KV cache is full. The
// unit is blocks, and so are the manager's thresholds. Higher means less loaded; 0 means full;
// negative means queued demand already exceeds the free memory. A draining instance reports
// -infinity (it wants every request moved off). The manager migrates out of instances below a
// threshold and into instances above another, and dispatches to the highest
// `dispatch_freeness`.
//
//   freeness          = (free blocks - virtual demand) / max(batch size, 1)
//   virtual demand    = blocks the head-of-line waiting request still needs (de-fragmentation:
//                       an instance that cannot start its next request looks loaded and sheds
//                       running requests), plus a headroom while a high-priority request runs
//                       (priority_headroom_fraction of the cache), plus infinity while draining
//   dispatch_freeness = SpreadBlocks(free blocks - every waiting request's demand - headroom,
//                                    running + waiting)
// SpreadBlocks divides a surplus among the requests, but not a deficit: a deficit divided by
// the requests would make an instance with a deep queue look less loaded than one with a short
// queue and a smaller deficit (-40 blocks over 26 requests is -1.5; -5 over 3 is -1.7), and
// dispatch would keep sending new requests to the back of the deep queue.
#pragma once

#include <algorithm>
#include <cstdint>

namespace loom {

// Blocks per request for a surplus (blocks >= 0); the blocks themselves for a deficit.
// Continuous at 0 and increasing in `blocks` for a fixed number of requests.
inline double SpreadBlocks(double blocks, int32_t requests) {
  return blocks >= 0 ? blocks / std::max(requests, 1) : blocks;
}

// The inverse of SpreadBlocks for the same number of requests.
inline double UnspreadBlocks(double value, int32_t requests) {
  return value >= 0 ? value * std::max(requests, 1) : value;
}

struct LoadInputs {
  int32_t num_blocks = 0;
  int32_t num_free_blocks = 0;
  int32_t num_running = 0;  // sequences holding blocks (the batch)
  int32_t num_waiting = 0;
  int32_t num_preempted_waiting = 0;  // waiting sequences that ran before (preempted)
  int32_t head_of_line_blocks = 0;  // blocks the first waiting sequence needs (0: none)
  int64_t waiting_blocks = 0;       // blocks every waiting sequence needs
  bool has_high_priority = false;
  double priority_headroom_fraction = 0.5;
  bool draining = false;
};

struct LoadReport {
  LoadInputs inputs;
  double freeness = 0;
  double dispatch_freeness = 0;
};

// The formulas above; pure.
LoadReport ComputeLoad(const LoadInputs& in);

}  // namespace loom
