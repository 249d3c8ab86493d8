// The dataset of a mixture (job key `sources:`): its sources' datasets back to back, so a
// global sample id is a source's offset plus its own id, and everything downstream of the
// index (reads, cache, quarantine by path, labels) works on the combined one unchanged.
#pragma once

#include <string>
#include <vector>

#include "source/dataset.hpp"

namespace stoker::source {

enum class ClassMerge {
  kPerSource,  // source s's labels follow those of the sources before it; classes "NAME/CLASS"
  kShared,     // one class list, the sorted union of the class names; the same name, the same label
};

// `names[i]` names `parts[i]` (its classes' prefix, and the part's name in status). Whole
// files keep a common root when every part has the same, else their names become absolute
// paths; tar members keep their shards (appended). Throws SourceError for kShared when a
// class is missing from a source (unless allow_missing), naming the class and the source,
// and when the sources hold more than 2^32-1 samples together.
Dataset combine_datasets(std::vector<Dataset> parts, const std::vector<std::string>& names, ClassMerge merge,
                         bool allow_missing);

}  // namespace stoker::source
