// What a job is to the all-jobs scheduler: an index (its lane in the WorkQueue, never reused),
// the pipeline its workers build a SampleProcessor for, and the work of one item. job::Job
// implements it; the scheduler knows nothing else of jobs, so this folder sits below job/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace stoker::image {
struct PipelineSpec;
class SampleProcessor;
}  // namespace stoker::image

namespace stoker::sched {

struct WorkItem;

class Task {
 public:
  virtual std::size_t index() const = 0;
  virtual const image::PipelineSpec& pipeline() const = 0;
  // Makes the item's sample with the calling worker's processor (built for pipeline()) and
  // scratch buffer; never throws (a bad sample is a verdict the task records itself).
  virtual void run(const WorkItem& item, image::SampleProcessor& processor,
                   std::vector<std::uint8_t>& file_buffer) = 0;

 protected:
  ~Task() = default;  // not owned through this interface
};

}  // namespace stoker::sched
