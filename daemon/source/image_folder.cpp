// The ImageFolder scan. It must match torchvision's labels exactly (a model trained on Stoker
// batches is evaluated with torchvision, and a shifted label is a silent disaster), and it must
// scan ImageNet's 1.28M files in seconds: one readdir pass per directory, the file type taken
// from readdir's d_type (no stat per file, except for symlinks), one sort per directory.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <exception>
#include <thread>
#include <cstring>
#include <limits>
#include <string_view>
#include <system_error>

#include "source/dataset.hpp"
#include "source/mapped_allocator.hpp"

namespace stoker::source {
namespace fs = std::filesystem;

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

namespace {

constexpr std::size_t kScanThreads = 8;  // class folders listed at once

// One scan thread's file names, back to back: two growing buffers per thread rather than an
// allocation per file.
struct NamePool {
  std::basic_string<char, std::char_traits<char>, MappedAllocator<char>> text;
  std::vector<std::pair<std::uint64_t, std::uint32_t>, MappedAllocator<std::pair<std::uint64_t, std::uint32_t>>> names;

  NamePool() {
    text.reserve(1 << 20);  // growth by doubling from a page-multiple start
    names.reserve(1 << 16);
  }

  std::string_view name(std::size_t i) const {
    return std::string_view(text).substr(names[i].first, names[i].second);
  }
};

struct DirFiles {
  std::string dir;                   // absolute, no trailing slash
  std::size_t first = 0, count = 0;  // its image files: pool.names[first, first + count), sorted
};

struct DirId {
  dev_t dev;
  ino_t ino;
  bool operator==(const DirId&) const = default;
};

class Walker {
 public:
  // `as`: list only folders that user could list (read_access.hpp); null: stokerd's own.
  Walker(NamePool& pool, const ReadAs* as) : pool_(pool), as_(as) {}
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

    DirFiles files;
    files.dir = dir;
    files.first = pool_.names.size();
    std::vector<std::string> subdirs;
    // readdir's d_type, not std::filesystem (which builds a path object per entry: a third of
    // a 1.28M-file scan): a stat only for symlinks (followed, like os.walk(followlinks=True))
    // and on file systems that leave d_type unknown.
    DIR* listing = nullptr;
    if (as_ != nullptr) {
      // Checked on the descriptor that is then listed: no window for a swapped symlink.
      const base::Result<int> fd = open_checked(dir, *as_, /*directory=*/true);
      if (!fd) throw SourceError(dir + ": cannot list: " + fd.status().message());
      listing = ::fdopendir(*fd);
      if (listing == nullptr) ::close(*fd);
    } else {
      listing = ::opendir(dir.c_str());
    }
    if (listing == nullptr) throw SourceError(dir + ": cannot list: " + std::strerror(errno));
    struct Closer {
      DIR* d;
      ~Closer() { ::closedir(d); }
    } closer{listing};
    for (;;) {
      errno = 0;
      const dirent* e = ::readdir(listing);
      if (e == nullptr) {
        if (errno != 0) throw SourceError(dir + ": cannot list: " + std::strerror(errno));
        break;
      }
      const std::string_view name = e->d_name;
      if (name == "." || name == "..") continue;
      bool is_dir = e->d_type == DT_DIR, is_file = e->d_type == DT_REG;
      if (e->d_type == DT_LNK || e->d_type == DT_UNKNOWN) {
        struct stat target {};
        if (::stat((dir + "/" + std::string(name)).c_str(), &target) == 0) {
          is_dir = S_ISDIR(target.st_mode);
          is_file = S_ISREG(target.st_mode);
        }
      }
      if (is_dir) {
        subdirs.push_back(dir + "/" + std::string(name));
      } else if (is_file && has_image_extension(name)) {
        // Regular files only (after following symlinks): torchvision would also list a FIFO
        // or a dangling link, and reading a FIFO would block a decode worker forever.
        pool_.names.emplace_back(pool_.text.size(), static_cast<std::uint32_t>(name.size()));
        pool_.text.append(name);
      }
    }

    files.count = pool_.names.size() - files.first;
    const auto begin = pool_.names.begin() + static_cast<std::ptrdiff_t>(files.first);
    std::sort(begin, pool_.names.end(), [this](const auto& a, const auto& b) {
      return std::string_view(pool_.text).substr(a.first, a.second) <
             std::string_view(pool_.text).substr(b.first, b.second);
    });
    out_.push_back(std::move(files));
    for (const auto& s : subdirs) walk(s, chain);
    chain.pop_back();
  }

  std::vector<DirFiles> take() { return std::move(out_); }

 private:
  NamePool& pool_;
  const ReadAs* as_;
  std::vector<DirFiles> out_;
};

}  // namespace

namespace {

Dataset scan_image_folder_unsettled(const fs::path& root_in, const ReadAs* as) {
  std::error_code ec;
  const fs::path root = fs::absolute(root_in, ec).lexically_normal();
  std::string root_s = root.native();
  while (root_s.size() > 1 && root_s.back() == '/') root_s.pop_back();
  // Checked for `as` first (so the texts below tell that user nothing about a path they could
  // not see), on a descriptor, and the classes are then listed through that very descriptor.
  int root_fd = -1;
  if (as != nullptr) {
    const base::Result<int> opened = open_checked(root_s, *as, /*directory=*/true);
    if (!opened) throw SourceError(root_s + ": cannot list: " + opened.status().message());
    root_fd = *opened;
  }
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) ::close(fd);
    }
  } closer{root_fd};
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
    const fs::path listed = root_fd >= 0 ? fs::path("/proc/self/fd/" + std::to_string(root_fd)) : root;
    fs::directory_iterator it(listed, ec);
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
  ds.root = prefix;  // "" for "/": names are then absolute
  // Class folders are walked by a few threads at once (listing is I/O on a cold cache, and
  // the kernel's directory work is CPU on a warm one); results are put together in class order.
  const std::size_t n_classes = ds.classes.size();
  const std::size_t n_threads = std::min<std::size_t>(kScanThreads, n_classes);
  std::vector<NamePool> pools(n_threads);
  struct ClassFiles {
    std::size_t pool = 0;
    std::vector<DirFiles> dirs;
  };
  std::vector<ClassFiles> per_class(n_classes);
  std::vector<std::exception_ptr> failed(n_classes);
  std::atomic<std::size_t> next{0};
  auto worker = [&](std::size_t thread) {
    for (std::size_t label; (label = next.fetch_add(1)) < n_classes;) {
      try {
        // torchvision: for root, _, files in sorted(os.walk(class_dir)): for f in sorted(files).
        // That is directories ordered by their whole path string ("c/sub" < "c/sub-2" < "c/sub/x"
        // is not how a tree walk goes, hence one sort over all of them), files by name within each.
        Walker w(pools[thread], as);
        std::vector<DirId> chain;
        w.walk(prefix + "/" + ds.classes[label], chain);
        std::vector<DirFiles> dirs = w.take();
        std::sort(dirs.begin(), dirs.end(), [](const DirFiles& a, const DirFiles& b) { return a.dir < b.dir; });
        per_class[label] = ClassFiles{thread, std::move(dirs)};
      } catch (...) {
        failed[label] = std::current_exception();
      }
    }
  };
  {
    std::vector<std::thread> threads;
    for (std::size_t t = 1; t < n_threads; ++t) threads.emplace_back(worker, t);
    worker(0);
    for (auto& t : threads) t.join();
  }
  for (const auto& f : failed) {
    if (f) std::rethrow_exception(f);  // the first class's failure, as a sequential scan gives
  }
  std::vector<std::string> empty_classes;
  for (std::size_t label = 0; label < n_classes; ++label) {
    const std::size_t before = ds.samples.size();
    const NamePool& pool = pools[per_class[label].pool];
    for (const auto& d : per_class[label].dirs) {
      // Names below the root: "<class>/<sub>/<file>" (d.dir starts with prefix + "/").
      const std::string dir = (prefix.empty() ? d.dir : d.dir.substr(prefix.size() + 1)) + "/";
      std::string name = dir;
      for (std::size_t i = d.first; i < d.first + d.count; ++i) {
        name.resize(dir.size());
        name.append(pool.name(i));
        ds.add(name, static_cast<std::int64_t>(label));
      }
    }
    per_class[label] = {};
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

}  // namespace

Dataset scan_image_folder(const fs::path& root_in, const ReadAs* as) {
  Dataset d = scan_image_folder_unsettled(root_in, as);
  settle(d);
  return d;
}

}  // namespace stoker::source
