// libFuzzer harness: a `stokerd --worker`'s handling of one stream's messages (issue #27),
// through the transport-free WorkerSession exactly as worker_server.cpp drives it: the first
// Request must be an Open, the later ones Items; each item is checked, and made when it passes.
// The worker asks for a token and allows only tests/data/demo (STOKER_FUZZ_DEMO_DIR).
//
// Input: a sequence of chunks, each a 3-byte little-endian length and that many bytes (clipped
// to the input), each parsed as a v1::Request. A chunk longer than kMaxRequestBytes is dropped
// unparsed, as gRPC drops a message past the server's max receive size. So that checked-in
// seeds do not depend on where the tree is, "@DEMO@" in an Open's job_yaml and base_dir and in
// an Item's path stands for the demo folder.
//
// Invariants checked (abort on violation): an Open is answered with the worker's version and
// accepted only with the token, one Open per stream; an item is processed only after an
// accepted Open; a result carries the item's id; a refused item is an I/O error without
// pixels; a made sample has exactly sample_bytes (after zstd when compressed); a failed one
// has none.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "image/sample_processor.hpp"
#include "image/sample_result.hpp"
#include "remote/protocol.hpp"
#include "remote/worker_session.hpp"

namespace fs = std::filesystem;
namespace remote = stoker::remote;
namespace v1 = stoker::remote::v1;

namespace {

constexpr const char* kToken = "stoker-fuzz-token";
// Items made per input, and the largest sample made: the harness looks for crashes, not for
// how long a valid but huge pipeline takes (the GPU node that sends one is authenticated and
// would make the same samples itself).
constexpr int kMaxProcessed = 6;
constexpr std::uint64_t kMaxFuzzSampleBytes = std::uint64_t{8} << 20;

struct World {
  std::string demo;
  remote::WorkerSettings settings;
  World() {
    const char* d = std::getenv("STOKER_FUZZ_DEMO_DIR");
    demo = fs::canonical(d ? d : STOKER_FUZZ_DEMO_DIR).string();
    settings.allow_roots = {demo};
    settings.token = kToken;
    settings.threads = 2;
  }
  void place(std::string& s) const {
    for (std::size_t at = s.find("@DEMO@"); at != std::string::npos; at = s.find("@DEMO@", at + demo.size())) {
      s.replace(at, 6, demo);
    }
  }
};

// What the inputs reached, printed at exit when STOKER_FUZZ_STATS is set (so a replay can show
// that its seeds get past the Open to made samples, not only to refusals).
struct Reached {
  std::size_t accepted = 0, refused = 0, items_refused = 0, made = 0, failed = 0;
  ~Reached() {
    if (std::getenv("STOKER_FUZZ_STATS") != nullptr) {
      std::fprintf(stderr, "fuzz_remote_worker: opens accepted %zu, refused %zu; items refused %zu, made %zu, failed %zu\n",
                   accepted, refused, items_refused, made, failed);
    }
  }
};
Reached reached;

[[noreturn]] void broken(const char* why) {
  std::fprintf(stderr, "fuzz_remote_worker: invariant broken: %s\n", why);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const World w;
  remote::WorkerSession session(w.settings);
  std::optional<stoker::image::SampleProcessor> processor;
  std::vector<std::uint8_t> bytes;
  bool first = true;
  int processed = 0;
  for (std::size_t at = 0; at + 3 <= size;) {
    const std::size_t declared = data[at] | (data[at + 1] << 8) | (static_cast<std::size_t>(data[at + 2]) << 16);
    at += 3;
    const std::size_t n = std::min(declared, size - at);
    const std::uint8_t* chunk = data + at;
    at += n;
    if (declared > remote::kMaxRequestBytes) continue;  // gRPC: RESOURCE_EXHAUSTED, never delivered
    v1::Request req;
    if (!req.ParseFromArray(chunk, static_cast<int>(n))) return 0;  // the server ends the stream
    // worker_server.cpp: the first message must be an Open, and only items may follow an
    // accepted one; anything else ends the stream (a second Open is still put to the session,
    // which must refuse it and stay as it was).
    if (req.has_open()) {
      v1::Open open = req.open();
      w.place(*open.mutable_job_yaml());
      w.place(*open.mutable_base_dir());
      const bool was_open = session.opened();
      const v1::OpenReply reply = session.open(open);
      if (reply.protocol_major() != remote::kWorkerMajor || reply.threads() != 2) broken("OpenReply's version or threads");
      if (reply.accepted() != (session.opened() && !was_open)) broken("accepted disagrees with the session");
      if (reply.accepted() && !remote::token_equal(open.token(), kToken)) broken("accepted without the token");
      if (reply.accepted() == !reply.error().empty()) broken("an answer both accepted and refused");
      if (was_open != !first) broken("a session open before its Open, or closed by a second one");
      ++(reply.accepted() ? reached.accepted : reached.refused);
      if (!reply.accepted()) return 0;
      first = false;
      processor.emplace(session.pipeline());
      continue;
    }
    if (first || !(req.has_item() || req.has_items())) return 0;
    // An ItemBatch is taken as its items one by one; past kMaxBatch the server ends the stream.
    std::vector<v1::Item> items;
    if (req.has_item()) {
      items.push_back(req.item());
    } else {
      if (static_cast<std::size_t>(req.items().items_size()) > remote::kMaxBatch) return 0;
      items.assign(req.items().items().begin(), req.items().items().end());
    }
    for (v1::Item& item : items) {
      if (!session.opened()) broken("an item reached an unopened session");
      w.place(*item.mutable_path());
      const bool ok = session.check_item(item).ok();
      std::error_code ec;
      if (ok && !remote::inside(fs::canonical(item.path(), ec), w.settings.allow_roots)) broken("an item outside passed");
      const std::uint64_t sample_bytes = session.pipeline().sample_bytes();
      if (ok && (processed >= kMaxProcessed || sample_bytes > kMaxFuzzSampleBytes)) continue;
      processed += ok ? 1 : 0;
      v1::Result result;
      session.process(item, *processor, bytes, result);
      if (result.id() != item.id()) broken("a result without its item's id");
      if (!ok && (result.error() != static_cast<std::uint32_t>(stoker::image::SampleErrorKind::kIo) ||
                  !result.pixels().empty())) {
        broken("a refused item was read");
      }
      ++(!ok ? reached.items_refused : result.error() != 0 ? reached.failed : reached.made);
      if (result.error() != 0) {
        if (!result.pixels().empty() || result.reason().empty()) broken("a failed sample with pixels or no reason");
      } else if (result.compressed()) {
        std::vector<std::uint8_t> raw(sample_bytes);
        if (!remote::decompress(result.pixels(), raw).ok()) broken("a compressed sample that does not decompress");
      } else if (result.pixels().size() != sample_bytes) {
        broken("a sample of another size");
      }
    }
  }
  return 0;
}
