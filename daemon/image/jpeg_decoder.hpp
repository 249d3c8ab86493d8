// libjpeg-turbo front end: header (dimensions, orientation) first, then a decode of only a
// window of rows and columns at a DCT scale. Errors come back as values (setjmp/longjmp
// inside; no C++ object lives across a longjmp).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "image/sample_result.hpp"

namespace stoker::image {

struct JpegHeader {
  std::uint32_t width = 0, height = 0;  // stored orientation
  int orientation = 1;
  int components = 0;
  // False when no EOI marker ends the file: it may be truncated, so the decode must run to
  // the last row (where libjpeg notices) instead of stopping after the crop window.
  bool ends_with_eoi = true;
};

struct JpegWindow {
  int scale_num = 8;          // decode at scale_num/8
  int x0 = 0, y0 = 0;         // requested window in scaled coordinates
  int x1 = 0, y1 = 0;
};

class JpegDecoder {
 public:
  JpegDecoder();
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // Reads the header; on failure returns false with `error` set.
  // Bounds libjpeg's working memory (a progressive JPEG keeps every coefficient: ~425 MB for
  // 12000x12000); a file that needs more fails cleanly as kTooLarge. 0: unbounded.
  void set_max_memory(std::uint64_t bytes);
  bool read_header(std::span<const std::uint8_t> data, bool strict, JpegHeader& out,
                   SampleResult& error);

  // Scaled image size for scale_num/8 (libjpeg's rounding).
  static std::uint32_t scaled(std::uint32_t v, int scale_num) { return (v * scale_num + 7) / 8; }

  // Decodes the window of the image whose header was read last. The pixels land in `pixels`
  // as RGB rows of `stride` bytes; (win_x, win_y) is the scaled-image position of its first
  // pixel (libjpeg may widen the window to iMCU boundaries). `warnings` counts tolerated
  // libjpeg warnings.
  bool decode(const JpegWindow& window, std::vector<std::uint8_t>& pixels, int& stride, int& win_x,
              int& win_y, SampleResult& result);

 private:
  struct State;
  State* s_;
};

}  // namespace stoker::image
