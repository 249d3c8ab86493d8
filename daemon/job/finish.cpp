// settle_bad_samples (finish.hpp): skip or substitute the bad samples of one batch.
#include "job/finish.hpp"

#include <cstring>

namespace stoker::job {

Settled settle_bad_samples(const BatchView& b, config::OnError on_error) {
  Settled out{b.count, 0};
  std::uint32_t bad = 0;
  for (std::uint32_t j = 0; j < b.count; ++j) bad += b.ok[j] == 0 ? 1 : 0;
  if (bad == 0) return out;

  const std::uint64_t bytes = b.sample_bytes;
  if (on_error == config::OnError::kSkip) {
    // No refill from later samples, so batch boundaries never depend on which files are bad
    // (exact resume, same batches across restarts).
    std::uint32_t w = 0;
    for (std::uint32_t j = 0; j < b.count; ++j) {
      if (b.ok[j] != 1) continue;
      if (w != j) {
        std::memmove(b.images + w * bytes, b.images + j * bytes, bytes);
        b.labels[w] = b.labels[j];
        b.ids[w] = b.ids[j];
        b.sample_ids[w] = b.sample_ids[j];
        b.ok[w] = 1;
      }
      ++w;
    }
    out.count = w;
  } else if (on_error == config::OnError::kSubstitute) {
    // The batch stays full and every label still matches its image.
    for (std::uint32_t j = 0; j < b.count; ++j) {
      if (b.ok[j] != 0) continue;
      std::int64_t src = -1;
      for (std::uint32_t d = 1; d < b.count && src < 0; ++d) {
        if (j >= d && b.ok[j - d] == 1) src = j - d;
        else if (j + d < b.count && b.ok[j + d] == 1) src = j + d;
      }
      if (src < 0) continue;
      std::memcpy(b.images + j * bytes, b.images + src * bytes, bytes);
      b.labels[j] = b.labels[src];
      b.ids[j] = b.ids[src];
      ++out.substituted;
    }
    if (out.substituted < bad) out.count = 0;  // no good sample at all in this batch
  }
  return out;
}

}  // namespace stoker::job
