// Sidecar indexes beside tar shards in a bucket: with one, starting a job reads a few KiB per
// shard instead of streaming every shard once. Nothing in a sidecar is trusted: every range
// must lie inside the shard as HEAD sized it, every name passes the rules a walked shard's do
// (unsafe names and duplicate keys skipped and counted), and anything malformed makes the
// caller index the shard by reading it, as if there were no sidecar.
#include <charconv>
#include <sstream>
#include <unordered_set>

#include "source/tar_shards.hpp"

namespace stoker::source::tar {
namespace {

constexpr std::string_view kDaliMagic = "v1.2 ";

std::optional<std::uint64_t> number(std::string_view s) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t pos = 0;
  while (pos < line.size()) {
    const std::size_t end = std::min(line.find(' ', pos), line.size());
    if (end > pos) out.push_back(line.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

// DALI's wds2idx: "v1.2 N", then per sample "EXT OFFSET SIZE NAME" per member (OFFSET: where
// the member's data starts). A name with a space cannot be told apart from the next member: refused.
std::optional<ShardIndex> parse_dali(std::string_view text, std::uint64_t shard_size, std::string& why) {
  ShardIndex ix;
  ix.file_size = shard_size;
  std::unordered_set<std::string_view> keys;
  std::size_t pos = text.find('\n');
  if (pos == std::string_view::npos) pos = text.size();
  const auto declared = number(text.substr(kDaliMagic.size(), pos - kDaliMagic.size()));
  if (!declared) {
    why = "a DALI index whose first line is not 'v1.2 N'";
    return std::nullopt;
  }
  std::size_t lines = 0;
  auto skip = [&](SkipKind kind, std::string_view member) {
    if (ix.skipped[kind]++ == 0) ix.first_skipped[kind] = std::string(member);
  };
  while (pos < text.size()) {
    const std::size_t end = std::min(text.find('\n', pos + 1), text.size());
    const std::string_view line = text.substr(pos + 1, end - pos - 1);
    pos = end;
    if (line.empty()) continue;
    ++lines;
    const auto w = words(line);
    if (w.size() % 4 != 0 || w.empty()) {
      why = "a DALI index line that is not 'EXT OFFSET SIZE NAME' per member (line " + std::to_string(lines + 1) + ")";
      return std::nullopt;
    }
    std::optional<std::size_t> image;
    for (std::size_t m = 0; m < w.size(); m += 4) {
      const auto offset = number(w[m + 1]), size = number(w[m + 2]);
      if (!offset || !size || *size > shard_size || *offset > shard_size - *size) {
        why = "a DALI index member outside the shard (line " + std::to_string(lines + 1) + ")";
        return std::nullopt;
      }
      std::string ext(w[m]);
      for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (ext == "cls" || ext == "txt") {
        why = "a DALI index gives no label's contents (.cls/.txt members)";
        return std::nullopt;
      }
      if (!image && image_extension(ext)) image = m;
    }
    const std::string_view name = image ? w[*image + 3] : w[3];
    const std::size_t base = name.rfind('/') == std::string_view::npos ? 0 : name.rfind('/') + 1;
    const std::string_view key = name.substr(0, name.find('.', base));
    if (unsafe_name(name)) {
      skip(kUnsafeName, name);
    } else if (!keys.insert(key).second) {
      skip(kDuplicateKey, name);
    } else if (!image) {
      skip(kNoImage, key);
    } else {
      ix.add(name, *number(w[*image + 1]), *number(w[*image + 2]), -1);
    }
  }
  if (lines != *declared) {
    why = "a DALI index that declares " + std::to_string(*declared) + " samples and lists " + std::to_string(lines);
    return std::nullopt;
  }
  return ix;
}

}  // namespace

std::string sidecar_url(const std::string& shard_url) {
  const std::size_t base = shard_url.rfind('/') == std::string::npos ? 0 : shard_url.rfind('/') + 1;
  const std::size_t dot = shard_url.find('.', base + 1);
  return shard_url.substr(0, dot) + ".idx";
}

std::optional<ShardIndex> parse_sidecar(std::string_view text, std::uint64_t shard_size, std::string& why) {
  if (text.substr(0, kDaliMagic.size()) == kDaliMagic) return parse_dali(text, shard_size, why);
  std::istringstream in{std::string(text)};
  auto records = parse_index(in);  // checks each range against the size the record states
  if (records.size() != 1) {
    why = records.empty() ? "neither Stoker's index format nor DALI's v1.2" : "more than one shard's index";
    return std::nullopt;
  }
  ShardIndex ix = std::move(records.begin()->second);
  if (ix.file_size != shard_size) {
    why = "made for a shard of " + std::to_string(ix.file_size) + " bytes; this one has " + std::to_string(shard_size) +
          " (out of date: write it again)";
    return std::nullopt;
  }
  for (const auto& e : ix.entries) {
    if (unsafe_name(ix.member(e))) {
      why = "a member name escaping the shard";
      return std::nullopt;
    }
  }
  return ix;
}

}  // namespace stoker::source::tar
