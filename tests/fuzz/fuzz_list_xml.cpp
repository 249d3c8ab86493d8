// Fuzz harness: the ListObjectsV2 reader (objstore/list_xml.cpp) on any bytes, what an
// S3-compatible server (or anything between) may answer a listing with. It must not crash,
// a page that says it is truncated must carry the token to go on with, and unescaping never
// makes text longer (every entity is at least as long as the UTF-8 it stands for).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "objstore/list_xml.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (const auto page = stoker::objstore::parse_list_page(text)) {
    if (page->truncated && page->next_token.empty()) std::abort();
    for (const auto& o : page->objects) {
      if (o.key.size() > size) std::abort();
    }
  }
  if (stoker::objstore::xml_unescape(text).size() > size) std::abort();
  return 0;
}
