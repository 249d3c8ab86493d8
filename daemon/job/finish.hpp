// Finishing a batch whose samples are all done: the places of bad samples are skipped
// (compacted away) or substituted (on_error), over a view of one slot's bytes. Knows no Job
// and no ring; the job builds the view from its segment (segment.hpp) and the ring's batch.
#pragma once

#include <cstdint>

#include "config/config.hpp"

namespace stoker::job {

// One slot's batch: `count` positions of `sample_bytes` image bytes each, with a class label
// and a sample id per position in the segment (`labels`, `ids`), the sample id and outcome per
// position as the ring holds them (`sample_ids`, `ok`: 1 good, 0 bad).
struct BatchView {
  std::uint8_t* images = nullptr;
  std::uint64_t sample_bytes = 0;
  std::int64_t* labels = nullptr;
  std::int64_t* ids = nullptr;
  std::uint32_t* sample_ids = nullptr;
  std::int8_t* ok = nullptr;
  std::uint32_t count = 0;
};

struct Settled {
  std::uint32_t count = 0;        // positions to publish
  std::uint32_t substituted = 0;  // bad positions filled with a copy of a good one
};

// kSkip: good samples are compacted to the front and the batch ships short (it keeps its
// place in the epoch: batch boundaries never depend on which files are bad). kSubstitute:
// each bad position takes a copy of the nearest good sample of the batch (image, label and
// id); count 0 when the batch has no good sample. kFail and batches with no bad sample are
// left as they are.
Settled settle_bad_samples(const BatchView& batch, config::OnError on_error);

}  // namespace stoker::job
