// libFuzzer harness: SampleProcessor::process on arbitrary bytes, in the four geometry x dtype x
// layout combinations, with small limits so that huge claimed sizes are refused quickly. Must
// never crash, leak, hang or touch memory outside `out`.
// The combination: a first byte below 4 is a selector and is not part of the image (the files
// in tests/data/fuzz-regressions start with one); any other first byte begins the image itself
// (no format starts below 4: JPEG 0xff, PNG 0x89, RIFF, II/MM, BM, P5/P6), and the input's
// length picks the combination. So the plain images of tests/data seed the fuzzer as images.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "image/sample_processor.hpp"

using namespace stoker::image;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static std::unique_ptr<SampleProcessor> processors[4];
  static std::vector<std::uint8_t> out;
  if (size < 1) return 0;
  const bool selector = data[0] < 4;
  const int which = selector ? data[0] : static_cast<int>(size & 3);
  if (!processors[which]) {
    PipelineSpec s;
    s.max_pixels = 4'000'000;
    s.max_memory_bytes = std::uint64_t{64} << 20;
    s.out_height = s.out_width = 24;
    s.geometry = which & 1 ? Geometry::kRandomResizedCrop : Geometry::kResizeCenterCrop;
    s.resize_shorter = 28;
    s.flip_probability = 0.5;
    s.dtype = which & 2 ? stoker::proto::DType::kFloat16 : stoker::proto::DType::kUInt8;
    s.layout = which & 2 ? stoker::proto::Layout::kNHWC : stoker::proto::Layout::kNCHW;
    s.normalize = (which & 2) != 0;
    s.mean = {0.485f, 0.456f, 0.406f};
    s.stddev = {0.229f, 0.224f, 0.225f};
    processors[which] = std::make_unique<SampleProcessor>(s);
    out.resize(std::max<std::size_t>(out.size(), s.sample_bytes()));
  }
  // The same processor is reused across inputs, as a worker's is: a refusal must leave it usable.
  const std::span<const std::uint8_t> image = selector ? std::span(data + 1, size - 1) : std::span(data, size);
  processors[which]->process(image, 7, 0, size, out.data());
  return 0;
}
