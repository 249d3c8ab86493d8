// ImageFolder over object storage: two levels of ListObjectsV2 (the class prefixes, then every
// key below each class) instead of a directory walk. See scan_object_folder in dataset.hpp.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "log/log.hpp"
#include "objstore/object_url.hpp"
#include "source/dataset.hpp"

namespace stoker::source {
namespace {

constexpr std::size_t kListers = 16;  // class listings in flight at once
constexpr auto kProgressEvery = std::chrono::seconds(2);

}  // namespace

Dataset scan_object_folder(const std::string& root, std::shared_ptr<objstore::Fetcher> fetcher,
                           const std::string& log_name) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string why;
  std::optional<objstore::ObjectUrl> url = objstore::parse_object_url(root, why);
  if (!url) throw SourceError(root + ": " + why);
  if (url->scheme != objstore::Scheme::kS3) throw SourceError(root + ": only an s3:// root can be listed");
  // The folder is the key prefix with one trailing '/': "train/" (or "" for the bucket).
  std::string prefix = url->key;
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (!prefix.empty()) prefix += '/';
  objstore::ObjectUrl at = *url;
  at.key = prefix;

  base::Result<objstore::ListPage> top = fetcher->list(at, "/");
  if (!top) throw SourceError(top.status().message());
  std::vector<std::string> classes;
  for (const std::string& p : top->prefixes) {
    if (p.size() <= prefix.size() + 1 || p.compare(0, prefix.size(), prefix) != 0) continue;
    classes.push_back(p.substr(prefix.size(), p.size() - prefix.size() - 1));
  }
  std::sort(classes.begin(), classes.end());
  if (classes.empty()) throw SourceError(root + ": no class folders (key prefixes ending in '/') below it");

  // Each class is one listing (1,000 keys a page), made kListers at a time: ImageNet's 1,000
  // classes are ~2,600 requests, which one after another would cost ~50 s at a 20 ms round
  // trip. A progress line every kProgressEvery says how far it has got.
  std::vector<std::vector<std::string>> names(classes.size());
  std::atomic<std::size_t> next{0}, listed{0}, keys{0};
  std::atomic<bool> failed{false};
  std::mutex failed_mu;
  std::string failure;  // the first failure; read once the listers are joined
  auto list_classes = [&] {
    for (std::size_t c; (c = next.fetch_add(1)) < classes.size();) {
      objstore::ObjectUrl cls = at;
      cls.key = prefix + classes[c] + "/";
      base::Result<objstore::ListPage> all = fetcher->list(cls, "");
      if (!all) {
        std::lock_guard lock(failed_mu);
        if (failure.empty()) failure = all.status().message();
        failed.store(true);
        next.store(classes.size());  // the others stop after their current class
        return;
      }
      for (const auto& o : all->objects) {
        if (o.key.size() > prefix.size() && o.key.back() != '/' && has_image_extension(o.key)) {
          names[c].push_back(o.key.substr(prefix.size()));
        }
      }
      keys += all->objects.size();
      listed++;
    }
  };
  std::vector<std::thread> listers;
  for (std::size_t i = 0; i < std::min(kListers, classes.size()); ++i) listers.emplace_back(list_classes);
  auto last = std::chrono::steady_clock::now();
  while (listed.load() < classes.size() && !failed.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (std::chrono::steady_clock::now() - last >= kProgressEvery) {
      last = std::chrono::steady_clock::now();
      stoker::log::info("{}: listing {}: {} of {} class(es), {} key(s) so far ({:.0f} s)", log_name, root,
                        listed.load(), classes.size(), keys.load(), std::chrono::duration<double>(last - t0).count());
    }
  }
  for (auto& t : listers) t.join();
  if (!failure.empty()) throw SourceError(failure);

  Dataset d;
  for (std::size_t c = 0; c < classes.size(); ++c) {
    // ImageFolder's order: folders sorted by path, files by name within each (a key's folder
    // is everything up to its last '/').
    std::sort(names[c].begin(), names[c].end(), [](std::string_view a, std::string_view b) {
      const std::string_view fa = a.substr(0, a.rfind('/')), fb = b.substr(0, b.rfind('/'));
      if (fa != fb) return fa < fb;
      return a.substr(a.rfind('/') + 1) < b.substr(b.rfind('/') + 1);
    });
    for (const std::string& n : names[c]) d.add(n, static_cast<std::int64_t>(c));
    std::vector<std::string>().swap(names[c]);  // freed as it goes: the index holds them now
    d.classes.push_back(classes[c]);
  }
  if (d.samples.empty()) throw SourceError(root + ": no images (no key with an image extension) below its classes");
  d.root = url->scheme == objstore::Scheme::kS3 ? "s3://" + url->bucket + (prefix.empty() ? "" : "/" + prefix.substr(0, prefix.size() - 1))
                                                : root;
  d.object_sources.push_back(ObjectSource{root, std::move(fetcher)});
  d.root_source = 0;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stoker::log::info("{}: listed {} image(s) in {} class(es) below {} ({:.2f} s)", log_name, d.samples.size(),
                    d.classes.size(), root, secs);
  settle(d);
  return d;
}

}  // namespace stoker::source
