#include <malloc.h>

#include "source/dataset.hpp"

namespace stoker::source {

void settle(Dataset& d) {
  // Appending grows both by doubling: up to half of each would be capacity never used.
  d.samples.shrink_to_fit();
  d.names.shrink_to_fit();
  // The scan's or the index's temporaries (a million small strings) are freed by now, but
  // glibc keeps freed heap mapped; hand it back so the daemon's RSS is what it holds.
  ::malloc_trim(0);
}

}  // namespace stoker::source
