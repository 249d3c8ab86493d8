// The job's side of remote workers (remote/dispatcher.hpp): an item begins here as run()
// begins it (the sample, quarantine and cache), a worker elsewhere makes the pixels, and the
// answer is settled here as run() settles a sample it made. Invariant: every item ends once,
// in settle_sample(), whichever machine made it; an item the dispatcher hands back to the
// queue has not ended.

#include "job/job.hpp"

#include "log/log.hpp"

namespace stoker::job {

std::optional<Job::RemoteSample> Job::begin_remote(const WorkItem& item) {
  const Ring::Sample sample_of = rings_[item.ring]->begin_sample(item);
  const std::uint32_t draw_id = sample_of.id;
  const std::uint32_t id = mixture_ ? sampler::untag(*mixture_, draw_id) : draw_id;
  image::SampleResult result;
  if (quarantined_[id].load() != 0) {
    result.error = image::SampleErrorKind::kCorrupt;  // known bad: as run(), not counted again
    settle_sample(item, id, result, false);
    return std::nullopt;
  }
  if (failed_.load()) {
    result.error = image::SampleErrorKind::kIo;  // job stopped: not decoded, not counted
    settle_sample(item, id, result, false);
    return std::nullopt;
  }
  if (cache_ && cache_->get(id, sample_out(item))) {
    settle_sample(item, id, result, true);
    return std::nullopt;
  }
  drop_read(item);  // the worker reads the bytes; read-ahead's copy is not needed
  const source::Sample& s = dataset_.samples[id];
  RemoteSample r;
  r.member = s.shard != source::Sample::kWholeFile;
  r.path = r.member ? dataset_.shards[s.shard] : dataset_.path(id);
  r.offset = s.offset;
  r.size = s.size;
  r.epoch = sample_of.epoch;
  r.draw = draw_id;
  r.id = id;
  return r;
}

void Job::finish_remote(const WorkItem& item, const RemoteSample& sample, const image::SampleResult& result) {
  if (formats_.record(sample.id, result.format)) {
    stoker::log::info("job {}: formats by content: {}", cfg_.name, formats_.summary());
  }
  if (result.ok() && cache_) cache_->put(sample.id, sample_out(item));
  settle_sample(item, sample.id, result, true);
}

image::SampleResult Job::make_remote_here(const RemoteSample& sample, image::SampleProcessor& processor,
                                          std::vector<std::uint8_t>& bytes, std::uint8_t* out) {
  image::SampleResult result;
  const source::ReadResult r = reader_->read(sample.id, bytes);
  if (!r.ok()) {
    result.error = image::SampleErrorKind::kIo;
    result.reason = r.reason;
    return result;
  }
  return processor.process(bytes, cfg_.pixel_seed(), sample.epoch, sample.draw, out);
}

}  // namespace stoker::job
