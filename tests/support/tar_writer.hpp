// A tiny tar writer for tests: ustar members (with the prefix field for long names), GNU long
// names ('L'), pax path records ('x'), global records ('g'), symlinks, and whatever broken
// bytes a test wants to append. Header-only; nothing else in the tree writes tars.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace stoker::test {

class TarWriter {
 public:
  enum class Name { kUstar, kGnuLong, kPax };

  // A regular file member. kUstar splits a name longer than 100 bytes into prefix/name.
  TarWriter& file(const std::string& name, const std::string& data, Name how = Name::kUstar) {
    if (how == Name::kGnuLong) {
      raw_member("././@LongLink", 'L', name + std::string(1, '\0'));
      raw_member(name.substr(0, 99), '0', data);
    } else if (how == Name::kPax) {
      const std::string body = " path=" + name + "\n";
      std::size_t len = body.size() + 1;
      while (std::to_string(len).size() + body.size() != len) ++len;  // LEN counts its own digits
      raw_member("PaxHeaders/x", 'x', std::to_string(len) + body);
      raw_member("short-name-ignored", '0', data);
    } else {
      raw_member(name, '0', data);
    }
    return *this;
  }
  TarWriter& file(const std::string& name, const std::vector<std::uint8_t>& data, Name how = Name::kUstar) {
    return file(name, std::string(data.begin(), data.end()), how);
  }
  TarWriter& symlink(const std::string& name, const std::string& target) {
    raw_member(name, '2', "", target);
    return *this;
  }
  TarWriter& global_pax(const std::string& record) {
    raw_member("pax_global_header", 'g', record);
    return *this;
  }
  TarWriter& directory(const std::string& name) {
    raw_member(name, '5', "");
    return *this;
  }
  // One header + data + padding; `name` up to 255 bytes (ustar prefix split).
  TarWriter& raw_member(const std::string& name, char type, const std::string& data, const std::string& link = "") {
    unsigned char h[512] = {};
    std::string n = name, prefix;
    if (n.size() > 100) {
      const std::size_t cut = n.find('/', n.size() - 101);  // the name part fits its 100 bytes
      prefix = n.substr(0, cut);
      n = n.substr(cut + 1);
    }
    std::memcpy(h, n.data(), std::min<std::size_t>(n.size(), 100));
    std::snprintf(reinterpret_cast<char*>(h + 100), 8, "%07o", 0644);
    std::snprintf(reinterpret_cast<char*>(h + 108), 8, "%07o", 1000);
    std::snprintf(reinterpret_cast<char*>(h + 116), 8, "%07o", 1000);
    std::snprintf(reinterpret_cast<char*>(h + 124), 12, "%011llo", static_cast<unsigned long long>(data.size()));
    std::snprintf(reinterpret_cast<char*>(h + 136), 12, "%011o", 1700000000);
    h[156] = static_cast<unsigned char>(type);
    std::memcpy(h + 157, link.data(), std::min<std::size_t>(link.size(), 100));
    std::memcpy(h + 257, "ustar\0" "00", 8);
    std::memcpy(h + 345, prefix.data(), std::min<std::size_t>(prefix.size(), 155));
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    std::snprintf(reinterpret_cast<char*>(h + 148), 8, "%06o", sum);
    h[155] = ' ';
    bytes_.append(reinterpret_cast<const char*>(h), 512);
    bytes_ += data;
    bytes_.append((512 - data.size() % 512) % 512, '\0');
    return *this;
  }
  // Offset where the next member's header will go.
  std::size_t size() const { return bytes_.size(); }
  std::string& bytes() { return bytes_; }

  // Writes the archive (with its two zero end blocks unless `end` is false).
  void save(const std::filesystem::path& p, bool end = true) const {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << bytes_;
    if (end) out << std::string(1024, '\0');
  }

 private:
  std::string bytes_;
};

inline std::vector<std::uint8_t> read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace stoker::test
