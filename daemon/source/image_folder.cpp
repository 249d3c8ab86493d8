#include <algorithm>
#include <array>
#include <cctype>
#include <system_error>

#include "source/dataset.hpp"

namespace stoker::source {
namespace fs = std::filesystem;

namespace {

// torchvision's IMG_EXTENSIONS; the content decides the format later, the extension only
// decides what counts as a sample (as in ImageFolder).
bool has_image_extension(const fs::path& p) {
  static constexpr std::array<const char*, 9> kExt = {".jpg", ".jpeg", ".png", ".ppm", ".bmp",
                                                      ".pgm", ".tif", ".tiff", ".webp"};
  std::string ext = p.extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return std::find_if(kExt.begin(), kExt.end(), [&](const char* e) { return ext == e; }) != kExt.end();
}

}  // namespace

Dataset scan_image_folder(const fs::path& root) {
  std::error_code ec;
  if (!fs::exists(root, ec)) throw SourceError(root.string() + ": no such directory");
  if (!fs::is_directory(root, ec)) throw SourceError(root.string() + ": not a directory");

  Dataset ds;
  fs::directory_iterator it(root, fs::directory_options::follow_directory_symlink, ec);
  if (ec) throw SourceError(root.string() + ": cannot list: " + ec.message());
  for (const auto& e : it) {
    if (e.is_directory(ec)) ds.classes.push_back(e.path().filename().string());
  }
  std::sort(ds.classes.begin(), ds.classes.end());
  if (ds.classes.empty()) {
    throw SourceError(root.string() + ": holds no class folders (ImageFolder expects root/<class>/<image>)");
  }

  for (std::size_t label = 0; label < ds.classes.size(); ++label) {
    // Same order as torchvision: directories in sorted order (as sorted(os.walk(...)) gives),
    // files sorted by name within each directory.
    const fs::path dir = root / ds.classes[label];
    std::vector<std::pair<std::string, std::vector<std::string>>> dirs;  // (dir path, file names)
    std::vector<fs::path> pending = {dir};
    while (!pending.empty()) {
      const fs::path d = pending.back();
      pending.pop_back();
      std::vector<std::string> names;
      fs::directory_iterator di(d, fs::directory_options::follow_directory_symlink, ec);
      if (ec) throw SourceError(d.string() + ": cannot list: " + ec.message());
      for (const auto& e : di) {
        if (e.is_directory(ec)) {
          pending.push_back(e.path());
        } else if (has_image_extension(e.path()) && e.is_regular_file(ec)) {
          names.push_back(e.path().filename().string());
        }
      }
      std::sort(names.begin(), names.end());
      dirs.emplace_back(fs::absolute(d).lexically_normal().string(), std::move(names));
    }
    std::sort(dirs.begin(), dirs.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [d, names] : dirs) {
      for (const auto& n : names) {
        ds.samples.push_back(Sample{(fs::path(d) / n).string(), static_cast<std::int64_t>(label)});
      }
    }
  }
  if (ds.samples.empty()) {
    throw SourceError(root.string() + ": holds no images (looked for .jpg .jpeg .png .ppm .bmp .pgm "
                      ".tif .tiff .webp in " + std::to_string(ds.classes.size()) + " class folder(s))");
  }
  return ds;
}

}  // namespace stoker::source
