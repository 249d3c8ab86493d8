// stokerd's options on CLI11: generated --help, typed values, errors that name the option.
#include "app/options.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "app/tar_index_tool.hpp"
#include "augment/op_schema.hpp"
#include "stoker/proto/control.hpp"  // kProtoMajor/Minor
#include "stoker/proto/layout.hpp"   // kLayoutMajor/Minor

namespace stoker::app {
namespace {

// Exit code of a command line stokerd cannot use; a refused config exits 2 as well.
constexpr int kUsageError = 2;

// --workers: 1..1024 in plain decimal, a ->transform() (a ->check() gets a copy): checked on
// the text and handed on without leading zeros, before CLI11's conversion, which reads base 0
// ("010" would be 8) and would accept "0x10".
std::string check_workers(std::string& v) {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  const bool digits = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
  if (!digits || *end != '\0' || n < 1 || n > 1024) return "must be 1..1024, got '" + v + "'";
  v = std::to_string(n);
  return {};
}

// --log-level: the levels server.log_level accepts. Anything else would reach spdlog's
// from_str, which turns a misspelt level into "off" and silences the daemon.
std::string check_log_level(const std::string& v) {
  for (const char* level : {"trace", "debug", "info", "warn", "error"}) {
    if (v == level) return {};
  }
  return "must be one of trace, debug, info, warn, error, got '" + v + "'";
}

// Help that starts, as it always did, with the synopsis, then the description, then CLI11's
// generated option list.
class UsageFirst : public CLI::Formatter {
 public:
  std::string make_description(const CLI::App*) const override { return {}; }
  std::string make_usage(const CLI::App* app, std::string) const override {
    return "usage: stokerd --config FILE [--socket PATH] [--state-dir DIR] [--workers N] [--log-level LEVEL]\n"
           "       stokerd --worker --listen HOST:PORT --allow-root DIR ...   (a remote worker: stokerd --worker --help)\n\n" +
           app->get_description() + "\n";
  }
};

// --list-ops: the augmentation steps a pipeline may hold, from augment/'s registry, one a
// line: "NAME PARAM,PARAM,... FLAGS" with FLAGS a comma list of flip_first (the engine flips
// before it) and after_normalize (it may follow normalize), or "-". The Python client's step
// lists are checked against it (tests/python/test_step_table.py).
void print_ops() {
  for (const augment::OpSchema& op : augment::op_schemas()) {
    std::string params, flags;
    for (const augment::ParamSpec& p : op.params) params += (params.empty() ? "" : ",") + std::string(p.name);
    if (op.flip_first) flags += "flip_first";
    if (op.runs_after_normalize) flags += (flags.empty() ? "" : ",") + std::string("after_normalize");
    std::printf("%.*s %s %s\n", static_cast<int>(op.name.size()), op.name.data(), params.empty() ? "-" : params.c_str(),
                flags.empty() ? "-" : flags.c_str());
  }
}

}  // namespace

bool parse_daemon_args(int argc, char** argv, DaemonOptions& out, int& exit_code) {
  CLI::App app("Serves the jobs of a YAML pipeline config to trainers through shared memory.", "stokerd");
  // An option given twice: the last one counts (as before; CLI11's default refuses it).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.formatter(std::make_shared<UsageFirst>());
  app.get_formatter()->column_width(22);
  app.add_flag_callback(
      "--version",
      [] {
        std::printf("stokerd %s (protocol %u.%u, layout %u.%u)\n", STOKER_VERSION, proto::kProtoMajor,
                    proto::kProtoMinor, proto::kLayoutMajor, proto::kLayoutMinor);
        throw CLI::Success();
      },
      "print the version, protocol and layout and exit");
  app.add_flag_callback(
      "--list-ops",
      [] {
        print_ops();
        throw CLI::Success();
      },
      "print the augmentation steps a pipeline may hold (name, parameters, placement) and exit");
  // Required, checked below rather than by ->required(): CLI11 checks that before unknown
  // arguments, and `stokerd --cnofig x` should name --cnofig.
  app.add_option("-c,--config", out.config_path, "pipeline config (see configs/README.md); required")
      ->option_text("FILE");
  app.add_option("--socket", out.socket_path,
                 "control socket; default, first set: config server.socket, $STOKER_SOCKET,\n"
                 "$XDG_RUNTIME_DIR/stoker/stoker.sock, /run/stoker/stoker.sock (root),\n"
                 "/tmp/stoker-<uid>/stoker.sock\n"
                 "Clients (no --socket): $STOKER_SOCKET, else the first that exists of\n"
                 "$XDG_RUNTIME_DIR/stoker/stoker.sock, /run/stoker/stoker.sock (any user;\n"
                 "the systemd unit's, see server.group), /tmp/stoker-<uid>/stoker.sock")
      ->option_text("PATH");
  app.add_option("--state-dir", out.state_dir,
                 "quarantine files and index caches; default: config server.state_dir,\n"
                 "$STATE_DIRECTORY (systemd's StateDirectory=), else the socket's folder")
      ->option_text("DIR");
  app.add_option("--workers", out.workers, "decode threads, 1..1024 (default: config server.workers, else all cores)")
      ->transform(CLI::Validator(check_workers, "", "workers"))
      ->option_text("N");
  app.add_option("--log-level", out.log_level, "trace|debug|info|warn|error (default: config, else info)")
      ->check(CLI::Validator(check_log_level, "", "log_level"))
      ->option_text("LEVEL");

  std::vector<std::string> index_shards;
  app.add_option("--write-tar-index", index_shards,
                 "write each local tar shard's index beside it (x.tar -> x.idx) and exit;\n"
                 "upload the .idx files beside the shards in a bucket, and a job reads them\n"
                 "instead of reading every shard once at start (docs/OBJECT_STORAGE.md)")
      ->option_text("SHARD...")
      ->expected(1, -1);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help or --version
      exit_code = app.exit(e);
      return false;
    }
    std::fprintf(stderr, "stokerd: %s\nRun 'stokerd --help' for the options.\n", e.what());
    exit_code = kUsageError;
    return false;
  }
  if (!index_shards.empty()) {
    exit_code = write_tar_indexes(index_shards);
    return false;
  }
  if (out.config_path.empty()) {
    std::fprintf(stderr, "stokerd: --config is required\nRun 'stokerd --help' for the options.\n");
    exit_code = kUsageError;
    return false;
  }
  return true;
}

}  // namespace stoker::app
