// `stokerctl consume` and `stokerctl status`.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "commands.hpp"
#include "stoker/proto/half.hpp"
#include "npy_writer.hpp"
#include "stoker/stoker.h"

namespace stoker::ctl {
namespace {

struct ConsumeArgs {
  std::string socket, job, dump, device;
  std::uint32_t rank = 0;
  std::uint32_t reader = 0;
  std::uint64_t batches = 0, epochs = 0, start_epoch = 0, start_batch = 0, start_position = 0;
  bool ids = false;
  int hold_ms = 0;
  int timeout_ms = -1;
  double seconds = 0;  // 0: no time limit
};

// Batches after the prefetched ones that a steady rate needs, fewer and the run was too short
// to tell the daemon's rate from what the ring held at connect.
constexpr std::uint64_t kMinSteadyBatches = 4;

// consume's options, bound to `a`. --batches/--epochs: both 0 (neither given) means one epoch.
void add_consume_options(CLI::App& cmd, ConsumeArgs& a) {
  // Required, checked by run_consume: CLI11 checks ->required() before unknown arguments, and
  // `consume --jbo x` should name --jbo rather than say --job is missing.
  cmd.add_option("--job", a.job, "the job to consume (required)")->option_text("NAME");
  cmd.add_option("--rank", a.rank, "rank to consume as (default 0)")->transform(whole_number())->option_text("R");
  cmd.add_option("--reader", a.reader, "reader I of the rank, for jobs with `readers: K` (default 0)")
      ->transform(whole_number())
      ->option_text("I");
  cmd.add_option("--batches", a.batches, "stop after N batches")->transform(whole_number())->option_text("N");
  cmd.add_option("--epochs", a.epochs, "stop after E epochs (default 1 when neither --batches nor --seconds is given)")
      ->transform(whole_number())
      ->option_text("E");
  cmd.add_option("--seconds", a.seconds, "stop after the batch that ends S seconds of consuming")
      ->check(CLI::PositiveNumber)
      ->option_text("S");
  cmd.add_flag("--ids", a.ids, "add each batch's sample ids and labels to its JSON line");
  cmd.add_option("--dump", a.dump, "write each batch's images, labels and ids as .npy files into DIR")
      ->option_text("DIR");
  cmd.add_option("--start-epoch", a.start_epoch, "resume at epoch E")->transform(whole_number())->option_text("E");
  cmd.add_option("--start-batch", a.start_batch, "resume at batch B of that epoch")
      ->transform(whole_number())
      ->option_text("B");
  cmd.add_option("--start-position", a.start_position,
                 "elastic resume: the whole world (of any size) already consumed the first P samples of the "
                 "start epoch's global order; this rank takes its share of the rest (every rank passes the same P)")
      ->transform(whole_number())
      ->option_text("P");
  cmd.add_option("--hold-ms", a.hold_ms, "hold each batch MS milliseconds before releasing it")
      ->transform(whole_number())
      ->option_text("MS");
  cmd.add_option("--timeout-ms", a.timeout_ms, "give up when a batch takes longer than MS (default: wait)")
      ->transform(whole_number())
      ->option_text("MS");
  add_socket_option(cmd, a.socket);
  cmd.add_option("--device", a.device, "take device batches; --dump then reads them back from the GPU")
      ->option_text("cuda[:N]");
}

const char* npy_descr(stoker_dtype t) {
  return t == STOKER_UINT8 ? "|u1" : t == STOKER_FLOAT16 ? "<f2" : t == STOKER_INT64 ? "<i8" : "<f4";
}

// --ids text of one sample's labels: its class index, or for soft labels (mixup/cutmix) the
// non-zero entries as [[class, weight], ...].
std::string label_text(const stoker_job_info& info, const void* labels, std::uint32_t i) {
  if (info.label_dtype == STOKER_INT64) return std::to_string(static_cast<const std::int64_t*>(labels)[i]);
  std::string out = "[";
  for (std::uint32_t k = 0; k < info.label_width; ++k) {
    const std::uint64_t at = std::uint64_t{i} * info.label_width + k;
    const float w = info.label_dtype == STOKER_FLOAT16 ? half_to_float(static_cast<const std::uint16_t*>(labels)[at])
                                                       : static_cast<const float*>(labels)[at];
    if (w == 0) continue;
    char num[32];
    std::snprintf(num, sizeof num, "%.6g", static_cast<double>(w));
    out += (out.size() > 1 ? ",[" : "[") + std::to_string(k) + "," + num + "]";
  }
  return out + "]";
}

int fail_with(const char* what) {
  std::fprintf(stderr, "stokerctl: %s: %s\n", what, stoker_last_error());
  return 1;
}

int run_consume(ConsumeArgs& a) {
  if (a.job.empty()) {
    std::fprintf(stderr, "stokerctl consume: --job is required\n");
    return 2;
  }
  if (a.batches == 0 && a.epochs == 0 && a.seconds == 0) a.epochs = 1;
  if (!a.dump.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(a.dump, ec);
    if (ec) {
      std::fprintf(stderr, "stokerctl: cannot create %s: %s\n", a.dump.c_str(), ec.message().c_str());
      return 1;
    }
  }

  stoker_options o;
  stoker_options_init(&o);
  o.socket_path = a.socket.empty() ? nullptr : a.socket.c_str();
  o.job = a.job.c_str();
  o.rank = a.rank;
  o.reader = a.reader;
  o.start_epoch = a.start_epoch;
  o.start_batch = a.start_batch;
  o.start_position = a.start_position;
  o.device = a.device.empty() ? nullptr : a.device.c_str();
  stoker_client* c = nullptr;
  if (stoker_client_open(&o, &c) != STOKER_OK) return fail_with("connect");
  stoker_job_info info;
  stoker_client_info(c, &info);

  const auto t0 = std::chrono::steady_clock::now();
  std::uint64_t batches = 0, samples = 0, epochs_done = 0;
  // The steady rate excludes what the ring held before this consumer asked (up to slot_count
  // batches prefetched at connect): it is timed from the arrival of the batch after those.
  const std::uint64_t prefetched = info.slot_count;
  std::chrono::steady_clock::time_point steady_from{};
  std::uint64_t steady_samples = 0;
  std::vector<double> next_us;  // each next() after the first, microseconds
  int rc = 0;
  const auto elapsed = [&t0] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  while ((a.batches == 0 || batches < a.batches) && (a.epochs == 0 || epochs_done < a.epochs) &&
         (a.seconds == 0 || batches == 0 || elapsed() < a.seconds)) {
    stoker_batch* b = nullptr;
    const auto asked = std::chrono::steady_clock::now();
    if (stoker_client_next(c, a.timeout_ms, &b) != STOKER_OK) {
      rc = fail_with("next batch");
      break;
    }
    // What next() cost (waiting included): the summary's next_us (bench-next.py compares it
    // with a socket round trip). The first batch pays for the ring filling after connect.
    if (batches > 0) {
      next_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - asked).count());
    }
    const std::uint32_t n = stoker_batch_count(b);
    if (batches == prefetched) steady_from = std::chrono::steady_clock::now();
    if (batches > prefetched) steady_samples += n;
    const std::uint64_t epoch = stoker_batch_epoch(b), index = stoker_batch_index(b);
    const bool last = stoker_batch_last_in_epoch(b) != 0;
    // Device mode: the batch is used from its device copy (ordered on the default stream), and
    // --dump writes what was read back from the device, not the host slot.
    std::vector<std::uint8_t> dev_images;
    std::vector<std::uint8_t> dev_labels;
    const void* images = stoker_batch_images(b);
    const void* labels = stoker_batch_label_data(b);  // int64 [n], or soft rows [n][label_width]
    const std::uint64_t label_bytes =
        std::uint64_t{info.label_width} * (info.label_dtype == STOKER_FLOAT16 ? 2 : info.label_dtype == STOKER_INT64 ? 8 : 4);
    stoker_dtype dtype = info.dtype;
    std::uint64_t image_bytes = info.image_bytes;
    if (!a.device.empty()) {
      void* dptr = nullptr;
      if (stoker_batch_device_images(b, nullptr, &dptr) != STOKER_OK) {
        rc = fail_with("device batch");
        stoker_batch_release(b);
        break;
      }
      dtype = info.device_dtype;
      image_bytes = info.device_image_bytes;
      if (!a.dump.empty() || a.ids) {
        dev_images.resize(image_bytes * n);
        dev_labels.resize(label_bytes * n);
        if (stoker_batch_device_to_host(b, dev_images.data(), dev_labels.data()) != STOKER_OK) {
          rc = fail_with("read back from the device");
          stoker_batch_release(b);
          break;
        }
        images = dev_images.data();
        labels = dev_labels.data();
      }
    }
    std::string line = "{\"epoch\":" + std::to_string(epoch) + ",\"index\":" + std::to_string(index) +
                       ",\"count\":" + std::to_string(n) + ",\"last\":" + (last ? "true" : "false");
    if (!a.device.empty()) line += ",\"device\":true";
    if (a.ids) {
      std::string ids = ",\"ids\":[", label_list = ",\"labels\":[";
      for (std::uint32_t i = 0; i < n; ++i) {
        ids += (i ? "," : "") + std::to_string(stoker_batch_ids(b)[i]);
        label_list += (i ? "," : "") + label_text(info, labels, i);
      }
      line += ids + "]" + label_list + "]";
    }
    line += "}";
    std::puts(line.c_str());
    std::fflush(stdout);

    if (!a.dump.empty()) {
      const std::string stem = a.dump + "/e" + std::to_string(epoch) + "_b" + std::to_string(index);
      std::string err;
      const bool ok =
          write_npy(stem + ".images.npy", npy_descr(dtype),
                    info.layout == STOKER_NCHW
                        ? std::vector<std::uint64_t>{n, info.channels, info.height, info.width}
                        : std::vector<std::uint64_t>{n, info.height, info.width, info.channels},
                    images, image_bytes * n, err) &&
          (info.label_dtype == STOKER_INT64
               ? write_npy(stem + ".labels.npy", "<i8", {n}, labels, 8ull * n, err)
               : write_npy(stem + ".labels.npy", npy_descr(info.label_dtype), {n, info.label_width}, labels,
                           label_bytes * n, err)) &&
          write_npy(stem + ".ids.npy", "<i8", {n}, stoker_batch_ids(b), 8ull * n, err);
      if (!ok) {
        std::fprintf(stderr, "stokerctl: %s\n", err.c_str());
        stoker_batch_release(b);
        rc = 1;
        break;
      }
    }
    if (a.hold_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a.hold_ms));
    stoker_batch_release(b);
    ++batches;
    samples += n;
    if (last) ++epochs_done;
  }
  const auto t_end = std::chrono::steady_clock::now();
  const double s = std::chrono::duration<double>(t_end - t0).count();
  // The headline images_per_s is the steady rate: timed from the arrival of the batch after
  // the ones the ring held at connect, whose samples it leaves out. Counting those (as
  // images_per_s_with_prefetched does) flatters a short run: 3 prefetched batches in a few
  // milliseconds read as 17,000 images/s. With fewer than kMinSteadyBatches after them there
  // is no steady rate to give: null, and `note` says so.
  const std::uint64_t steady_batches = batches > prefetched ? batches - prefetched - 1 : 0;
  const double steady_s = batches > prefetched ? std::chrono::duration<double>(t_end - steady_from).count() : 0.0;
  const bool measured = steady_batches >= kMinSteadyBatches && steady_s > 0;
  char rate[64] = "null", steady_span[64] = "null";
  if (measured) {
    std::snprintf(rate, sizeof rate, "%.1f", static_cast<double>(steady_samples) / steady_s);
    std::snprintf(steady_span, sizeof steady_span, "%.3f", steady_s);
  }
  const std::string note =
      measured ? "null"
               : "\"too short to measure a steady rate: " + std::to_string(steady_batches) + " batch(es) after the " +
                     std::to_string(prefetched) + " prefetched at connect, at least " +
                     std::to_string(kMinSteadyBatches) + " needed (consume more: --epochs, --batches or --seconds)\"";
  char next_text[96] = "null";  // median and p99 of next()'s time, batches after the first
  if (!next_us.empty()) {
    std::sort(next_us.begin(), next_us.end());
    std::snprintf(next_text, sizeof next_text, "{\"median\":%.1f,\"p99\":%.1f}", next_us[next_us.size() / 2],
                  next_us[std::min(next_us.size() - 1, next_us.size() * 99 / 100)]);
  }
  std::printf("{\"summary\":true,\"batches\":%llu,\"samples\":%llu,\"epochs\":%llu,\"seconds\":%.3f,"
              "\"images_per_s\":%s,\"steady_seconds\":%s,\"note\":%s,\"prefetched_batches_excluded\":%llu,"
              "\"images_per_s_with_prefetched\":%.1f,\"next_us\":%s}\n",
              static_cast<unsigned long long>(batches), static_cast<unsigned long long>(samples),
              static_cast<unsigned long long>(epochs_done), s, rate, steady_span, note.c_str(),
              static_cast<unsigned long long>(prefetched), s > 0 ? samples / s : 0.0, next_text);
  stoker_client_close(c);
  return rc;
}

int run_status(const std::string& socket) {
  char* json = nullptr;
  if (stoker_daemon_status(socket.empty() ? nullptr : socket.c_str(), &json) != STOKER_OK) {
    return fail_with("status");
  }
  std::puts(json);
  stoker_free(json);
  return 0;
}

}  // namespace

Command add_consume(CLI::App& root) {
  CLI::App* cmd = describe(root.add_subcommand("consume", "connect as a real consumer; one JSON line per batch, then a "
                                                          "throughput line"),
                           "consume --job NAME [--rank R] [--reader I] [--batches N | --epochs E | --seconds S] [--ids] [--dump DIR]\n"
                           "          [--start-epoch E] [--start-batch B] [--hold-ms MS] [--timeout-ms MS] [--socket PATH]\n"
                           "          [--device cuda[:N]]");
  auto a = std::make_shared<ConsumeArgs>();  // outlives the parse: run() reads it
  add_consume_options(*cmd, *a);
  return {cmd, [a] { return run_consume(*a); }};
}

Command add_status(CLI::App& root) {
  CLI::App* cmd = describe(root.add_subcommand("status", "jobs (each with its definition as YAML), consumers, ring "
                                                         "occupancy, images/s, error\ncounts and the last reload's "
                                                         "outcome, as JSON"),
                           "status [--socket PATH]");
  auto socket = std::make_shared<std::string>();
  add_socket_option(*cmd, *socket);
  return {cmd, [socket] { return run_status(*socket); }};
}

}  // namespace stoker::ctl
