// Unit tier: the ImageFolder scan gives torchvision's classes, labels and sample order, and
// refuses (naming the path) what torchvision would refuse or what would go wrong later.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "source/dataset.hpp"

namespace fs = std::filesystem;
using Catch::Contains;
using stoker::source::scan_image_folder;
using stoker::source::SourceError;

namespace {

// A fresh folder under /tmp, removed with everything in it at the end of the test.
class TempTree {
 public:
  TempTree() {
    static int counter = 0;
    root_ = fs::temp_directory_path() /
            ("stoker-source-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  ~TempTree() {
    std::error_code ec;
    // Give back any permission a test took away, so that everything can be removed.
    for (auto it = fs::recursive_directory_iterator(root_, ec); it != fs::recursive_directory_iterator(); it.increment(ec)) {
      fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
    }
    fs::remove_all(root_, ec);
  }
  const fs::path& root() const { return root_; }
  void file(const std::string& rel) const {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << "not really an image; the scan never opens files";
  }
  void dir(const std::string& rel) const { fs::create_directories(root_ / rel); }

 private:
  fs::path root_;
};

std::vector<std::string> relative_paths(const stoker::source::Dataset& ds, const fs::path& root) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < ds.samples.size(); ++i) out.push_back(fs::path(ds.path(i)).lexically_relative(root).string());
  return out;
}

std::vector<std::int64_t> labels(const stoker::source::Dataset& ds) {
  std::vector<std::int64_t> out;
  for (const auto& s : ds.samples) out.push_back(s.label);
  return out;
}

std::string refusal(const fs::path& root) {
  try {
    scan_image_folder(root);
  } catch (const SourceError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("source: classes, labels and order are torchvision's", "[source]") {
  TempTree t;
  for (const char* f : {"b/x.jpg", "b/A.JPG", "b/sub/z.png", "b/sub-2/y.jpeg", "b/sub/deeper/w.Tiff",
                        "a/1.jpg", "a/notes.txt", "a/deep/er/2.webp", "a/.hidden/h.ppm", "a/.jpg",
                        "a/x.jpg.bak", "a/UPPER.JPEG", "a/Z.bmp", "a/m.pgm", "a/t.tif", "a/dir.jpg/in.png",
                        ".ipynb_checkpoints/k.png", "C/c.jpg"}) {
    t.file(f);
  }
  t.file("loose.jpg");  // files directly in root are not samples
  const auto ds = scan_image_folder(t.root());

  // Sorted by code point: '.' < 'C' < 'a' < 'b'; a hidden folder is a class, as in torchvision.
  CHECK(ds.classes == std::vector<std::string>{".ipynb_checkpoints", "C", "a", "b"});
  // torchvision: for root, _, files in sorted(os.walk(class_dir)): for f in sorted(files).
  // Directories by their whole path ("b/sub" < "b/sub-2" < "b/sub/deeper", since ' -' < '/'),
  // names by byte order ("A.JPG" < "x.jpg"), any case of extension, a file named ".jpg" included.
  CHECK(relative_paths(ds, t.root()) == std::vector<std::string>{
                                            ".ipynb_checkpoints/k.png",
                                            "C/c.jpg",
                                            "a/.jpg",
                                            "a/1.jpg",
                                            "a/UPPER.JPEG",
                                            "a/Z.bmp",
                                            "a/m.pgm",
                                            "a/t.tif",
                                            "a/.hidden/h.ppm",
                                            "a/deep/er/2.webp",
                                            "a/dir.jpg/in.png",
                                            "b/A.JPG",
                                            "b/x.jpg",
                                            "b/sub/z.png",
                                            "b/sub-2/y.jpeg",
                                            "b/sub/deeper/w.Tiff",
                                        });
  CHECK(labels(ds) == std::vector<std::int64_t>{0, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3});
  for (std::size_t i = 0; i < ds.samples.size(); ++i) CHECK(fs::path(ds.path(i)).is_absolute());
}

TEST_CASE("source: symlinks are followed - what cannot be read as a file is not a sample", "[source]") {
  TempTree t;
  TempTree elsewhere;
  elsewhere.file("cats/c1.jpg");
  elsewhere.file("more/m1.jpg");
  t.file("dogs/d1.jpg");
  fs::create_directory_symlink(elsewhere.root() / "cats", t.root() / "cats");         // a class
  fs::create_directory_symlink(elsewhere.root() / "more", t.root() / "dogs" / "more");  // a subfolder
  fs::create_symlink(t.root() / "dogs" / "d1.jpg", t.root() / "dogs" / "d2.jpg");    // a file
  fs::create_symlink(t.root() / "nowhere.jpg", t.root() / "dogs" / "dangling.jpg");  // not readable
  REQUIRE(::mkfifo((t.root() / "dogs" / "pipe.jpg").c_str(), 0600) == 0);            // would block a reader
  const auto ds = scan_image_folder(t.root());
  CHECK(ds.classes == std::vector<std::string>{"cats", "dogs"});
  CHECK(relative_paths(ds, t.root()) == std::vector<std::string>{"cats/c1.jpg", "dogs/d1.jpg", "dogs/d2.jpg", "dogs/more/m1.jpg"});
  CHECK(labels(ds) == std::vector<std::int64_t>{0, 1, 1, 1});
}

TEST_CASE("source: a relative root gives absolute sample paths", "[source]") {
  TempTree t;
  t.file("k/a.jpg");
  const fs::path rel = t.root().lexically_relative(fs::current_path());
  REQUIRE(rel.is_relative());
  const auto ds = scan_image_folder(rel);
  REQUIRE(ds.samples.size() == 1);
  CHECK(ds.path(0) == (t.root() / "k" / "a.jpg").string());
}

TEST_CASE("source: a missing root, a file, or a root without images is refused naming it", "[source]") {
  CHECK(refusal("/nonexistent/stoker") == "/nonexistent/stoker: no such directory");
  TempTree t;
  t.file("only-a-file.jpg");
  CHECK(refusal(t.root() / "only-a-file.jpg") == (t.root() / "only-a-file.jpg").string() + ": not a directory");
  CHECK_THAT(refusal(t.root()), Contains(t.root().string() + ": holds no images: no class folders"));
  t.file("cls/readme.txt");
  t.dir("cls/sub");
  CHECK_THAT(refusal(t.root()), Contains(t.root().string() + ": holds no images") && Contains("1 class folder(s)"));
}

TEST_CASE("source: a class folder without images is refused, as torchvision does", "[source]") {
  TempTree t;
  t.file("cat/a.jpg");
  t.dir(".ipynb_checkpoints");  // would take label 0 and shift every real class by one
  t.file("dog/readme.txt");
  CHECK(refusal(t.root()) == t.root().string() + ": class folder(s) without images: .ipynb_checkpoints, dog "
                                                 "(each would take a label; remove them or move the dataset into its own folder)");
}

TEST_CASE("source: unreadable folders and symlink loops are refused naming the folder", "[source]") {
  TempTree t;
  t.file("cat/a.jpg");
  t.file("cat/locked/b.jpg");
  fs::create_directory_symlink(t.root() / "cat", t.root() / "cat" / "loop");
  CHECK(refusal(t.root()) == (t.root() / "cat" / "loop").string() + ": symlink loop (leads back to a folder above it)");
  fs::remove(t.root() / "cat" / "loop");
  CHECK(scan_image_folder(t.root()).samples.size() == 2);

  if (::geteuid() == 0) {
    WARN("running as root: permission checks skipped");
    return;
  }
  fs::permissions(t.root() / "cat" / "locked", fs::perms::none);
  CHECK(refusal(t.root()) == (t.root() / "cat" / "locked").string() + ": cannot list: Permission denied");
  fs::permissions(t.root() / "cat" / "locked", fs::perms::owner_all);
  fs::permissions(t.root(), fs::perms::owner_write);  // not readable
  CHECK(refusal(t.root()) == t.root().string() + ": cannot list: Permission denied");
  fs::permissions(t.root(), fs::perms::owner_all);
}

// ---------------------------------------------------------------------------------------------
// File lists (type: filelist)

namespace {

fs::path write_list(const fs::path& dir, const std::string& text) {
  const fs::path p = dir / "list.txt";
  std::ofstream(p) << text;
  return p;
}

std::string list_error(const fs::path& list, const fs::path& root) {
  try {
    stoker::source::read_file_list(list, root);
  } catch (const SourceError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("file list: the file's order, integer labels as given, paths relative to the root", "[source]") {
  const fs::path dir = fs::temp_directory_path() / ("stoker-list-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto d = stoker::source::read_file_list(
      write_list(dir, "# comment\nb/2.jpg,7\n\n  a/1.jpg\t3  \n/abs/x.png,0\n"), "/data");
  REQUIRE(d.samples.size() == 3);
  CHECK(d.path(0) == "/data/b/2.jpg");
  CHECK(d.samples[0].label == 7);
  CHECK(d.path(1) == "/data/a/1.jpg");
  CHECK(d.samples[1].label == 3);
  CHECK(d.path(2) == "/abs/x.png");
  CHECK(d.classes.size() == 8);  // "0".."7"
  fs::remove_all(dir);
}

TEST_CASE("file list: class names sorted as ImageFolder sorts folders - without labels the parent folder",
          "[source]") {
  const fs::path dir = fs::temp_directory_path() / ("stoker-list2-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto named = stoker::source::read_file_list(write_list(dir, "x.jpg,zebra\ny.jpg,ant\nz.jpg,zebra\n"), dir);
  CHECK(named.classes == std::vector<std::string>{"ant", "zebra"});
  CHECK((named.samples[0].label == 1 && named.samples[1].label == 0 && named.samples[2].label == 1));
  auto folders = stoker::source::read_file_list(write_list(dir, "dog/1.jpg\ncat/2.jpg\ndog/3.jpg\n"), dir);
  CHECK(folders.classes == std::vector<std::string>{"cat", "dog"});
  CHECK((folders.samples[0].label == 1 && folders.samples[1].label == 0));
  CHECK(folders.path(0) == (dir / "dog/1.jpg").string());
  fs::remove_all(dir);
}

TEST_CASE("file list errors name the file and line", "[source]") {
  const fs::path dir = fs::temp_directory_path() / ("stoker-list3-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string f = (dir / "list.txt").string();
  CHECK(list_error(write_list(dir, "a/1.jpg,1\na/2.jpg\n"), dir) ==
        f + ":2: labels must be given on every line or on none (this line has none, earlier ones do not agree)");
  CHECK(list_error(write_list(dir, "a/1.jpg,1,extra\n"), dir) == f + ":1: expected 'path' or 'path,label', found more fields");
  CHECK(list_error(write_list(dir, "ok.jpg,1\n ,2\n"), dir) == f + ":2: empty path");
  CHECK(list_error(write_list(dir, "a.jpg,\n"), dir) == f + ":1: empty label after the separator");
  CHECK(list_error(write_list(dir, "# nothing\n\n"), dir) == f + ": the file list holds no samples");
  CHECK(list_error(write_list(dir, "top.jpg\n"), dir) == f + ":1: no label and no parent folder to take the class from");
  fs::remove_all(dir);
}

TEST_CASE("file list: paths are normalised as before ('.', '..', '//'), names kept below the root when all are",
          "[source]") {
  const fs::path dir = fs::temp_directory_path() / ("stoker-list3-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto below = stoker::source::read_file_list(write_list(dir, "a/./b.jpg,0\nc//d.jpg,1\ne/../f.jpg,0\n"), "/data");
  CHECK(below.root == "/data");
  CHECK(below.name(0) == "a/b.jpg");  // the dataset holds the name, path() adds the root
  CHECK(below.path(0) == "/data/a/b.jpg");
  CHECK(below.path(1) == "/data/c/d.jpg");
  CHECK(below.path(2) == "/data/f.jpg");
  const auto escaping = stoker::source::read_file_list(write_list(dir, "a.jpg,0\n../up.jpg,1\n"), "/data/x");
  CHECK(escaping.root.empty());  // one path leaves the root: every name is absolute
  CHECK(escaping.path(0) == "/data/x/a.jpg");
  CHECK(escaping.path(1) == "/data/up.jpg");
  fs::remove_all(dir);
}
