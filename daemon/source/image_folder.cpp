// The ImageFolder scan. It must match torchvision's labels exactly (a model trained on Stoker
// batches is evaluated with torchvision, and a shifted label is a silent disaster), and it must
// scan ImageNet's 1.28M files in seconds: one readdir pass per directory, the file type taken
// from readdir's d_type (no stat per file, except for symlinks), one sort per directory.
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <string_view>
#include <system_error>

#include "source/dataset.hpp"

namespace stoker::source {
namespace fs = std::filesystem;

namespace {

// torchvision's IMG_EXTENSIONS, matched as it does: the lowercased name ends with one (so a
// file named ".jpg" counts too). The content decides the format later; the extension only
// decides what counts as a sample.
bool has_image_extension(std::string_view name) {
  static constexpr std::array<std::string_view, 9> kExt = {".jpg", ".jpeg", ".png", ".ppm", ".bmp",
                                                           ".pgm", ".tif", ".tiff", ".webp"};
  for (std::string_view e : kExt) {
    if (name.size() < e.size()) continue;
    const std::string_view tail = name.substr(name.size() - e.size());
    bool same = true;
    for (std::size_t i = 0; i < e.size() && same; ++i) {
      char c = tail[i];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      same = c == e[i];
    }
    if (same) return true;
  }
  return false;
}

struct DirFiles {
  std::string dir;                  // absolute, no trailing slash
  std::vector<std::string> names;   // image file names in it, sorted
};

struct DirId {
  dev_t dev;
  ino_t ino;
  bool operator==(const DirId&) const = default;
};

class Walker {
 public:
  // Lists `dir` and everything below it into out_ (unsorted across directories).
  // `chain` holds the directories from the class folder down to `dir`'s parent: a symlink
  // back to one of them is a loop, which os.walk would follow until the path got too long.
  void walk(const std::string& dir, std::vector<DirId>& chain) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) {
      throw SourceError(dir + ": cannot read: " + std::strerror(errno));
    }
    const DirId id{st.st_dev, st.st_ino};
    if (std::find(chain.begin(), chain.end(), id) != chain.end()) {
      throw SourceError(dir + ": symlink loop (leads back to a folder above it)");
    }
    chain.push_back(id);

    DirFiles files{dir, {}};
    std::vector<std::string> subdirs;
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    if (ec) throw SourceError(dir + ": cannot list: " + ec.message());
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      // directory_entry caches readdir's d_type: these tests cost a stat only for symlinks
      // (followed, like os.walk(followlinks=True)) and on filesystems without d_type.
      const fs::directory_entry& e = *it;
      const std::string& full = e.path().native();
      const std::string_view name = std::string_view(full).substr(full.rfind('/') + 1);
      std::error_code type_ec;
      if (e.is_directory(type_ec)) {
        subdirs.push_back(full);
      } else if (has_image_extension(name) && e.is_regular_file(type_ec)) {
        // Regular files only (after following symlinks): torchvision would also list a FIFO
        // or a dangling link, and reading a FIFO would block a decode worker forever.
        files.names.emplace_back(name);
      }
    }
    if (ec) throw SourceError(dir + ": cannot list: " + ec.message());

    std::sort(files.names.begin(), files.names.end());
    out_.push_back(std::move(files));
    for (const auto& s : subdirs) walk(s, chain);
    chain.pop_back();
  }

  std::vector<DirFiles> take() { return std::move(out_); }

 private:
  std::vector<DirFiles> out_;
};

}  // namespace

Dataset scan_image_folder(const fs::path& root_in) {
  std::error_code ec;
  const fs::path root = fs::absolute(root_in, ec).lexically_normal();
  std::string root_s = root.native();
  while (root_s.size() > 1 && root_s.back() == '/') root_s.pop_back();
  const fs::file_status st = fs::status(root, ec);
  if (!fs::exists(st)) {
    throw SourceError(root_s + ": " + (ec && ec != std::errc::no_such_file_or_directory ? ec.message()
                                                                                        : "no such directory"));
  }
  if (!fs::is_directory(st)) throw SourceError(root_s + ": not a directory");

  // Classes: the sorted names of root's subfolders (symlinks to folders included, hidden
  // folders included, exactly as torchvision's find_classes). Byte order of UTF-8 names is
  // code-point order, which is what Python's sorted() gives.
  Dataset ds;
  {
    fs::directory_iterator it(root, ec);
    if (ec) throw SourceError(root_s + ": cannot list: " + ec.message());
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      std::error_code type_ec;
      if (it->is_directory(type_ec)) ds.classes.push_back(it->path().filename().native());
    }
    if (ec) throw SourceError(root_s + ": cannot list: " + ec.message());
  }
  std::sort(ds.classes.begin(), ds.classes.end());
  if (ds.classes.empty()) {
    throw SourceError(root_s + ": holds no images: no class folders (ImageFolder expects root/<class>/<image>)");
  }

  const std::string prefix = root_s == "/" ? "" : root_s;  // so paths never start with "//"
  std::vector<std::string> empty_classes;
  for (std::size_t label = 0; label < ds.classes.size(); ++label) {
    // torchvision: for root, _, files in sorted(os.walk(class_dir)): for f in sorted(files).
    // That is directories ordered by their whole path string ("c/sub" < "c/sub-2" < "c/sub/x"
    // is not how a tree walk goes, hence one sort over all of them), files by name within each.
    Walker w;
    std::vector<DirId> chain;
    w.walk(prefix + "/" + ds.classes[label], chain);
    std::vector<DirFiles> dirs = w.take();
    std::sort(dirs.begin(), dirs.end(), [](const DirFiles& a, const DirFiles& b) { return a.dir < b.dir; });
    const std::size_t before = ds.samples.size();
    for (const auto& d : dirs) {
      for (const auto& n : d.names) {
        ds.samples.push_back(Sample{d.dir + "/" + n, static_cast<std::int64_t>(label)});
      }
    }
    if (ds.samples.size() == before) empty_classes.push_back(ds.classes[label]);
  }

  if (ds.samples.empty()) {
    throw SourceError(root_s + ": holds no images (looked for .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff "
                      ".webp, any case, in " + std::to_string(ds.classes.size()) + " class folder(s))");
  }
  // torchvision refuses a class folder without images (it would still take a label, and a
  // stray ".ipynb_checkpoints" would shift every other label by one): refuse it too.
  if (!empty_classes.empty()) {
    std::string list;
    for (std::size_t i = 0; i < empty_classes.size() && i < 5; ++i) list += (i ? ", " : "") + empty_classes[i];
    if (empty_classes.size() > 5) list += ", ... (" + std::to_string(empty_classes.size()) + " in all)";
    throw SourceError(root_s + ": class folder(s) without images: " + list +
                      " (each would take a label; remove them or move the dataset into its own folder)");
  }
  // Sample ids travel as 32-bit values (sampler, ring slots).
  if (ds.samples.size() > std::numeric_limits<std::uint32_t>::max()) {
    throw SourceError(root_s + ": holds " + std::to_string(ds.samples.size()) +
                      " images, more than the 2^32 - 1 a job can index");
  }
  return ds;
}

}  // namespace stoker::source
