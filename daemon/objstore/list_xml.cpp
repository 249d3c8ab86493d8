#include "objstore/list_xml.hpp"

#include <charconv>

namespace stoker::objstore {

namespace {

// The text of the first <tag>...</tag> in `s`, nullopt when absent.
std::optional<std::string_view> element(std::string_view s, std::string_view tag) {
  const std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
  const auto b = s.find(open);
  if (b == std::string_view::npos) return std::nullopt;
  const auto e = s.find(close, b + open.size());
  if (e == std::string_view::npos) return std::nullopt;
  return s.substr(b + open.size(), e - b - open.size());
}

// Calls f on the inside of each <tag>...</tag> in order.
template <class F>
bool each(std::string_view s, std::string_view tag, F&& f) {
  const std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
  for (std::size_t at = 0;;) {
    const auto b = s.find(open, at);
    if (b == std::string_view::npos) return true;
    const auto e = s.find(close, b + open.size());
    if (e == std::string_view::npos) return false;  // truncated
    if (!f(s.substr(b + open.size(), e - b - open.size()))) return false;
    at = e + close.size();
  }
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

}  // namespace

std::string xml_unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    if (s[i] != '&') {
      out.push_back(s[i++]);
      continue;
    }
    const auto semi = s.find(';', i);
    const std::string_view ent = semi == std::string_view::npos ? std::string_view() : s.substr(i + 1, semi - i - 1);
    std::optional<std::uint32_t> cp;
    if (ent == "amp") cp = '&';
    else if (ent == "lt") cp = '<';
    else if (ent == "gt") cp = '>';
    else if (ent == "quot") cp = '"';
    else if (ent == "apos") cp = '\'';
    else if (ent.size() > 1 && ent[0] == '#') {
      const bool hex = ent[1] == 'x' || ent[1] == 'X';
      const std::string_view digits = ent.substr(hex ? 2 : 1);
      std::uint32_t v = 0;
      const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v, hex ? 16 : 10);
      if (!digits.empty() && r.ec == std::errc() && r.ptr == digits.data() + digits.size() && v <= 0x10ffff) cp = v;
    }
    if (!cp) {
      out.push_back(s[i++]);
      continue;
    }
    append_utf8(out, *cp);
    i = semi + 1;
  }
  return out;
}

std::optional<ListPage> parse_list_page(std::string_view xml) {
  if (xml.find("<ListBucketResult") == std::string_view::npos) return std::nullopt;
  if (xml.find("</ListBucketResult>") == std::string_view::npos) return std::nullopt;
  ListPage page;
  const bool ok = each(xml, "Contents", [&](std::string_view c) {
    const auto key = element(c, "Key");
    const auto size = element(c, "Size");
    if (!key) return false;
    ListedObject o{xml_unescape(*key), 0};
    if (size) {
      const auto r = std::from_chars(size->data(), size->data() + size->size(), o.size);
      if (r.ec != std::errc()) return false;
    }
    page.objects.push_back(std::move(o));
    return true;
  }) && each(xml, "CommonPrefixes", [&](std::string_view c) {
    const auto p = element(c, "Prefix");
    if (!p) return false;
    page.prefixes.push_back(xml_unescape(*p));
    return true;
  });
  if (!ok) return std::nullopt;
  // <IsTruncated> and <NextContinuationToken> sit at the top level, after or before the
  // entries; a key can never hold '<', so the first match is the top-level one.
  page.truncated = element(xml, "IsTruncated").value_or("false") == "true";
  if (const auto t = element(xml, "NextContinuationToken")) page.next_token = xml_unescape(*t);
  if (page.truncated && page.next_token.empty()) return std::nullopt;
  return page;
}

}  // namespace stoker::objstore
