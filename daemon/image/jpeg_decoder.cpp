#include "image/jpeg_decoder.hpp"

#include <algorithm>
#include <climits>
#include <csetjmp>
#include <cstdio>
#include <algorithm>
#include <cstring>

#include <jerror.h>
#include <jpeglib.h>

#include "image/exif.hpp"

namespace stoker::image {

namespace {

// libjpeg's error manager extended with where to jump and what went wrong.
struct JpegErr {
  jpeg_error_mgr pub;  // first member: libjpeg hands back a pointer to it
  std::jmp_buf jump;
  SampleErrorKind kind;
  char message[JMSG_LENGTH_MAX];
  std::uint32_t warnings;
  bool strict;
};

}  // namespace

// Everything that crosses a longjmp is plain data in here.
struct JpegDecoder::State {
  jpeg_decompress_struct cinfo;
  JpegErr err;
  bool cmyk = false;
  bool adobe_inverted = false;
};

namespace {

void on_error_exit(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegErr*>(c->err);
  (*c->err->format_message)(c, e->message);
  if (c->err->msg_code == JERR_BAD_PRECISION) {
    std::snprintf(e->message, sizeof e->message, "%d-bit JPEG is not supported (only 8-bit)",
                  c->err->msg_parm.i[0]);
  }
  switch (c->err->msg_code) {
    case JERR_BAD_PRECISION:
    case JERR_CONVERSION_NOTIMPL:
    case JERR_NOT_COMPILED:
    case JERR_BAD_J_COLORSPACE:
    case JERR_ARITH_NOTIMPL:
      e->kind = SampleErrorKind::kUnsupported;
      break;
    case JERR_IMAGE_TOO_BIG:
      e->kind = SampleErrorKind::kTooLarge;
      break;
    case JERR_NO_BACKING_STORE:  // the decode would need more than max_memory_to_use
      std::snprintf(e->message, sizeof e->message,
                    "decoding needs more memory than decode.max_memory_mb allows (%ld MB)",
                    static_cast<long>(c->mem->max_memory_to_use >> 20));
      e->kind = SampleErrorKind::kTooLarge;
      break;
    case JERR_INPUT_EMPTY:
    case JERR_INPUT_EOF:
      e->kind = SampleErrorKind::kTruncated;
      break;
    default:
      if (e->kind == SampleErrorKind::kNone) e->kind = SampleErrorKind::kCorrupt;
  }
  std::longjmp(e->jump, 1);
}

void on_emit_message(j_common_ptr c, int level) {
  if (level >= 0) return;  // trace messages
  auto* e = reinterpret_cast<JpegErr*>(c->err);
  e->warnings++;
  // As PIL: a premature end of data is an error; other corrupt-data warnings are tolerated
  // (and counted) unless strict.
  if (c->err->msg_code == JWRN_JPEG_EOF || e->strict) {
    (*c->err->format_message)(c, e->message);
    e->kind = c->err->msg_code == JWRN_JPEG_EOF ? SampleErrorKind::kTruncated : SampleErrorKind::kCorrupt;
    std::longjmp(e->jump, 1);
  }
}

void fail_from(const JpegErr& e, SampleResult& r) {
  r.error = e.kind == SampleErrorKind::kNone ? SampleErrorKind::kCorrupt : e.kind;
  r.reason = std::string("JPEG: ") + e.message;
  r.warnings = e.warnings;
}

}  // namespace

JpegDecoder::JpegDecoder() : s_(new State) {
  std::memset(&s_->cinfo, 0, sizeof s_->cinfo);
  s_->cinfo.err = jpeg_std_error(&s_->err.pub);
  s_->err.pub.error_exit = on_error_exit;
  s_->err.pub.emit_message = on_emit_message;
  jpeg_create_decompress(&s_->cinfo);
}

void JpegDecoder::set_max_memory(std::uint64_t bytes) {
  s_->cinfo.mem->max_memory_to_use = static_cast<long>(std::min<std::uint64_t>(bytes, LONG_MAX));
}

JpegDecoder::~JpegDecoder() {
  jpeg_destroy_decompress(&s_->cinfo);
  delete s_;
}

bool JpegDecoder::read_header(std::span<const std::uint8_t> data, bool strict, JpegHeader& out,
                              SampleResult& result) {
  State& s = *s_;
  j_decompress_ptr c = &s.cinfo;
  s.err.kind = SampleErrorKind::kNone;
  s.err.message[0] = '\0';
  s.err.warnings = 0;
  s.err.strict = strict;
  // Back to the start state whatever the previous file left (a caller that refused a file
  // after its header, for max_pixels, never decoded it): libjpeg would otherwise refuse the
  // next file with "Improper call to JPEG library in state 202".
  jpeg_abort_decompress(c);
  if (setjmp(s.err.jump)) {
    fail_from(s.err, result);
    jpeg_abort_decompress(c);
    return false;
  }
  jpeg_mem_src(c, data.data(), static_cast<unsigned long>(data.size()));
  jpeg_save_markers(c, JPEG_APP0 + 1, 0xffff);
  jpeg_read_header(c, TRUE);
  if (c->data_precision != 8) {
    std::snprintf(s.err.message, sizeof s.err.message, "%d-bit JPEG is not supported", c->data_precision);
    s.err.kind = SampleErrorKind::kUnsupported;
    fail_from(s.err, result);
    jpeg_abort_decompress(c);
    return false;
  }
  out.width = c->image_width;
  out.height = c->image_height;
  out.components = c->num_components;
  out.orientation = 1;
  // Entropy-coded data never contains FF D9 (0xFF is stuffed), so an EOI within the last
  // bytes (a few may follow it) means the scan is complete.
  out.ends_with_eoi = false;
  const std::size_t tail = std::min<std::size_t>(data.size(), 4096);
  for (std::size_t i = data.size() - tail; i + 1 < data.size(); ++i) {
    if (data[i] == 0xff && data[i + 1] == 0xd9) out.ends_with_eoi = true;
  }
  for (jpeg_saved_marker_ptr m = c->marker_list; m != nullptr; m = m->next) {
    if (m->marker == JPEG_APP0 + 1) {
      const int o = exif_orientation(m->data, m->data_length);
      if (o != 1) out.orientation = o;
    }
  }
  s.cmyk = c->jpeg_color_space == JCS_CMYK || c->jpeg_color_space == JCS_YCCK;
  s.adobe_inverted = s.cmyk && c->saw_Adobe_marker;
  return true;
}

bool JpegDecoder::decode(const JpegWindow& w, std::vector<std::uint8_t>& pixels, int& stride,
                         int& win_x, int& win_y, SampleResult& result) {
  State& s = *s_;
  j_decompress_ptr c = &s.cinfo;
  if (setjmp(s.err.jump)) {
    fail_from(s.err, result);
    jpeg_abort_decompress(c);
    return false;
  }
  c->scale_num = static_cast<unsigned>(w.scale_num);
  c->scale_denom = 8;
  c->out_color_space = s.cmyk ? JCS_CMYK : JCS_RGB;
  c->dct_method = JDCT_ISLOW;
  jpeg_start_decompress(c);

  JDIMENSION xoff = static_cast<JDIMENSION>(w.x0);
  JDIMENSION width = static_cast<JDIMENSION>(w.x1 - w.x0);
  if (width < c->output_width) jpeg_crop_scanline(c, &xoff, &width);
  const int comps = c->output_components;
  stride = static_cast<int>(width) * comps;
  const int rows = w.y1 - w.y0;
  pixels.resize(static_cast<std::size_t>(rows) * stride);
  if (w.y0 > 0) jpeg_skip_scanlines(c, static_cast<JDIMENSION>(w.y0));
  // Several rows per call: with 2x vertical chroma subsampling libjpeg makes two rows per
  // row group and, asked for one, copies the second through a spare buffer.
  constexpr int kRowsPerCall = 16;
  JSAMPROW rowp[kRowsPerCall];
  while (c->output_scanline < static_cast<JDIMENSION>(w.y1)) {
    const int first = static_cast<int>(c->output_scanline) - w.y0;
    const int n = std::min(kRowsPerCall, w.y1 - static_cast<int>(c->output_scanline));
    for (int i = 0; i < n; ++i) rowp[i] = pixels.data() + static_cast<std::size_t>(first + i) * stride;
    jpeg_read_scanlines(c, rowp, static_cast<JDIMENSION>(n));
  }
  // The rows below the window are never decoded.
  jpeg_abort_decompress(c);

  if (comps == 4) {
    // CMYK -> RGB as PIL does; Adobe files store inverted CMYK.
    const int n = static_cast<int>(width);
    for (int r = 0; r < rows; ++r) {
      const std::uint8_t* in = pixels.data() + static_cast<std::size_t>(r) * stride;
      std::uint8_t* o = pixels.data() + static_cast<std::size_t>(r) * n * 3;
      for (int x = 0; x < n; ++x) {
        int C = in[4 * x], M = in[4 * x + 1], Y = in[4 * x + 2], K = in[4 * x + 3];
        if (!s.adobe_inverted) {
          C = 255 - C; M = 255 - M; Y = 255 - Y; K = 255 - K;
        }
        o[3 * x] = static_cast<std::uint8_t>((C * K + 127) / 255);
        o[3 * x + 1] = static_cast<std::uint8_t>((M * K + 127) / 255);
        o[3 * x + 2] = static_cast<std::uint8_t>((Y * K + 127) / 255);
      }
    }
    stride = n * 3;
  }
  win_x = static_cast<int>(xoff);
  win_y = w.y0;
  result.warnings = s.err.warnings;
  return true;
}

}  // namespace stoker::image
