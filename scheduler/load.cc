#include "scheduler/load.h"

#include <algorithm>
#include <limits>

namespace loom {

LoadReport ComputeLoad(const LoadInputs& in) {
  LoadReport r;
  r.inputs = in;
  if (in.draining) {
    r.freeness = -std::numeric_limits<double>::infinity();
    r.dispatch_freeness = -std::numeric_limits<double>::infinity();
    return r;
  }
  const double headroom =
      in.has_high_priority ? in.priority_headroom_fraction * in.num_blocks : 0.0;
  const double free = in.num_free_blocks;
  r.freeness = (free - in.head_of_line_blocks - headroom) / std::max(in.num_running, 1);
  r.dispatch_freeness = SpreadBlocks(free - static_cast<double>(in.waiting_blocks) - headroom,
                                     in.num_running + in.num_waiting);
  return r;
}

}  // namespace loom
