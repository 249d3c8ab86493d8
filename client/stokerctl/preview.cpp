// `stokerctl preview JOB --out FILE.png`: a contact sheet of one real batch as the trainer
// receives it, so the augmentation can be looked at before burning GPU hours.
//
// Where the batch comes from: preview attaches as an ordinary consumer of (rank, reader) at
// (--epoch, --batch), default 0/0, takes that one batch and disconnects. It steals nothing
// silently: while a trainer holds that rank (or reader) the daemon refuses it ("already has a
// consumer"), and a trainer that connects afterwards asks for its own position in its Hello,
// so it gets every batch it would have got (only the prefetched slots are planned again).
// For a job with `readers: K`, --reader picks one of the rank's readers.
//
// Pixels: uint8 output is shown as is; float16/float32 output is de-normalized with the job's
// mean/std (status "output"): p = round(clamp((x * std[c] + mean[c]) * 255, 0, 255)), which
// is ToTensor's scaling undone when `normalize` is absent (mean 0, std 1). NCHW or NHWC.
//
// Sheet geometry (also printed as JSON so scripts and tests can find each tile):
// tile k at column k % C, row k / C; its top-left pixel at
// (kPad + col * (W + kPad), kPad + row * (H + kLabelHeight + kPad)); its label under it.
#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <png.h>

#include "commands.hpp"
#include "stoker/proto/half.hpp"
#include "preview_font.hpp"
#include "stoker/stoker.h"

namespace stoker::ctl {
namespace {

using Json = nlohmann::json;

constexpr int kPad = 4;
constexpr int kLabelHeight = kCellHeight + 3;
constexpr std::uint8_t kBackground[3] = {32, 32, 32};
constexpr std::uint8_t kInk[3] = {240, 240, 240};

int fail(const std::string& what) {
  std::fprintf(stderr, "stokerctl preview: %s\n", what.c_str());
  return 1;
}

struct PreviewArgs {
  std::string job, out, socket;
  std::uint64_t rank = ~0ull;  // ~0: the job's first rank (from the status)
  std::uint64_t reader = 0, epoch = 0, batch = 0, columns = 0, timeout_ms = 60000;
};

int run_preview(PreviewArgs a) {
  const std::string &job = a.job, &out = a.out, &socket = a.socket;
  std::uint64_t rank = a.rank;
  const std::uint64_t reader = a.reader, epoch = a.epoch, batch = a.batch, columns = a.columns, timeout_ms = a.timeout_ms;
  if (job.empty() || out.empty()) {
    std::fprintf(stderr, "stokerctl preview: usage: stokerctl preview JOB --out FILE.png [--rank R] [--reader I]\n");
    return 2;
  }

  // The job's output description (mean/std, class names, first rank) from the status.
  char* text = nullptr;
  if (stoker_daemon_status(socket.empty() ? nullptr : socket.c_str(), &text) != STOKER_OK) {
    return fail(stoker_last_error());
  }
  const Json st = Json::parse(text, nullptr, false);
  stoker_free(text);
  if (st.is_discarded()) return fail("stokerd sent a status that is not JSON");
  const Json* jj = nullptr;
  if (st.contains("jobs") && st["jobs"].is_array()) {
    for (const Json& j : st["jobs"]) {
      if (j.is_object() && j.value("name", "") == job) jj = &j;
    }
  }
  if (jj == nullptr) return fail("no job '" + job + "' in this stokerd");
  const Json output = jj->value("output", Json::object());
  std::array<float, 3> mean{0, 0, 0}, stdv{1, 1, 1};
  if (output.value("normalize", false)) {
    for (int c = 0; c < 3; ++c) {
      mean[c] = output["mean"].at(c).get<float>();
      stdv[c] = output["std"].at(c).get<float>();
    }
  }
  const std::vector<std::string> class_names = jj->value("class_names", std::vector<std::string>());
  if (rank == ~0ull) rank = jj->value("ranks", Json::array({0})).at(0).get<std::uint64_t>();

  stoker_options opt;
  stoker_options_init(&opt);
  opt.socket_path = socket.empty() ? nullptr : socket.c_str();
  opt.job = job.c_str();
  opt.rank = static_cast<std::uint32_t>(rank);
  opt.reader = static_cast<std::uint32_t>(reader);
  opt.start_epoch = epoch;
  opt.start_batch = batch;
  stoker_client* client = nullptr;
  if (stoker_client_open(&opt, &client) != STOKER_OK) return fail(stoker_last_error());
  stoker_job_info info{};
  stoker_client_info(client, &info);
  stoker_batch* b = nullptr;
  if (stoker_client_next(client, static_cast<int>(timeout_ms), &b) != STOKER_OK) {
    const std::string why = stoker_last_error();
    stoker_client_close(client);
    return fail(why);
  }

  const int n = static_cast<int>(stoker_batch_count(b));
  const int H = static_cast<int>(info.height), W = static_cast<int>(info.width), C = static_cast<int>(info.channels);
  const int cols = static_cast<int>(columns != 0 ? columns : std::ceil(std::sqrt(std::max(n, 1))));
  const int rows = std::max(1, (n + cols - 1) / cols);
  const int sheet_w = kPad + cols * (W + kPad), sheet_h = kPad + rows * (H + kLabelHeight + kPad);
  std::vector<std::uint8_t> sheet(static_cast<std::size_t>(sheet_w) * sheet_h * 3);
  for (std::size_t p = 0; p < sheet.size(); p += 3) std::memcpy(&sheet[p], kBackground, 3);

  const auto* images = static_cast<const std::uint8_t*>(stoker_batch_images(b));
  const std::int64_t* labels = stoker_batch_labels(b);
  const std::size_t dsize = info.dtype == STOKER_UINT8 ? 1 : info.dtype == STOKER_FLOAT16 ? 2 : 4;
  Json tiles = Json::array();
  for (int k = 0; k < n; ++k) {
    const std::uint8_t* img = images + static_cast<std::size_t>(k) * info.image_bytes;
    const int x0 = kPad + (k % cols) * (W + kPad), y0 = kPad + (k / cols) * (H + kLabelHeight + kPad);
    for (int y = 0; y < H; ++y) {
      for (int x = 0; x < W; ++x) {
        std::uint8_t* px = &sheet[(static_cast<std::size_t>(y0 + y) * sheet_w + x0 + x) * 3];
        for (int c = 0; c < 3; ++c) {
          const int sc = std::min(c, C - 1);  // grey images: the one channel three times
          const std::size_t at = info.layout == STOKER_NCHW
                                     ? (static_cast<std::size_t>(sc) * H + y) * W + x
                                     : (static_cast<std::size_t>(y) * W + x) * C + sc;
          const std::uint8_t* e = img + at * dsize;
          if (info.dtype == STOKER_UINT8) {
            px[c] = *e;
            continue;
          }
          float v;
          if (info.dtype == STOKER_FLOAT16) {
            std::uint16_t h;
            std::memcpy(&h, e, 2);
            v = half_to_float(h);
          } else {
            std::memcpy(&v, e, 4);
          }
          const float p = (v * stdv[sc] + mean[sc]) * 255.0f;
          px[c] = static_cast<std::uint8_t>(std::lround(std::clamp(std::isnan(p) ? 0.0f : p, 0.0f, 255.0f)));
        }
      }
    }
    const std::int64_t label = labels[k];
    std::string caption = std::to_string(label);
    if (label >= 0 && static_cast<std::size_t>(label) < class_names.size()) caption += " " + class_names[label];
    draw_text(sheet, sheet_w, sheet_h, x0, y0 + H + 2, W, caption, kInk);
    tiles.push_back({{"x", x0}, {"y", y0}, {"label", label}, {"id", stoker_batch_ids(b)[k]}});
  }
  const std::uint64_t got_epoch = stoker_batch_epoch(b), got_batch = stoker_batch_index(b);
  stoker_batch_release(b);
  stoker_client_close(client);

  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(sheet_w);
  png.height = static_cast<png_uint_32>(sheet_h);
  png.format = PNG_FORMAT_RGB;
  if (png_image_write_to_file(&png, out.c_str(), 0, sheet.data(), sheet_w * 3, nullptr) == 0) {
    return fail("cannot write " + out + ": " + png.message);
  }
  const Json summary = {{"out", out}, {"job", job}, {"rank", info.rank}, {"reader", info.reader},
                        {"epoch", got_epoch}, {"batch", got_batch}, {"count", n}, {"columns", cols},
                        {"width", sheet_w}, {"height", sheet_h}, {"tile", {W, H}},
                        {"denormalized", info.dtype != STOKER_UINT8}, {"tiles", tiles}};
  std::puts(summary.dump().c_str());
  return 0;
}

}  // namespace

Command add_preview(CLI::App& root) {
  CLI::App* cmd = describe(root.add_subcommand("preview", "contact sheet of one real batch as the trainer gets it "
                                                          "(float output de-normalized),\nlabel under each tile; "
                                                          "attaches as rank R's consumer (refused while a trainer has "
                                                          "it)"),
                           "preview JOB --out FILE.png [--rank R] [--reader I] [--epoch E] [--batch B] [--columns C]\n"
                           "          [--socket PATH]");
  auto a = std::make_shared<PreviewArgs>();
  // JOB may also be given as --job; a missing JOB or --out keeps the message with the synopsis.
  cmd->add_option("JOB,--job", a->job, "the job to look at")->type_name("");
  cmd->add_option("--out", a->out, "the PNG file to write")->option_text("FILE.png");
  cmd->add_option("--rank", a->rank, "attach as this rank (default: the job's first)")
      ->transform(whole_number())
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{0xffffffffu}))
      ->option_text("R");
  cmd->add_option("--reader", a->reader, "reader I of the rank, for jobs with `readers: K` (default 0)")
      ->transform(whole_number())
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{0xffffffffu}))
      ->option_text("I");
  cmd->add_option("--epoch", a->epoch, "the batch's epoch (default 0)")->transform(whole_number())->option_text("E");
  cmd->add_option("--batch", a->batch, "the batch's index in its epoch (default 0)")
      ->transform(whole_number())
      ->option_text("B");
  cmd->add_option("--columns", a->columns, "tiles per row, 1..1024 (default: a square sheet)")
      ->transform(whole_number())
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1024}))
      ->option_text("C");
  cmd->add_option("--timeout-ms", a->timeout_ms, "give up when the batch takes longer, up to 3600000 (default 60000)")
      ->transform(whole_number())
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{3600000}))
      ->option_text("MS");
  add_socket_option(*cmd, a->socket);
  return {cmd, [a] { return run_preview(*a); }};
}

}  // namespace stoker::ctl
