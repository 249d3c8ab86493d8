// The few parts of an S3 ListObjectsV2 answer that a source needs, read from its XML: each
// object's key and size, the common prefixes (the "folders" when a delimiter is given), and
// whether another page follows with which token. Not a general XML parser: tags are matched
// by name, entities (&amp; &lt; &gt; &quot; &apos; &#N; &#xN;) are decoded in the text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stoker::objstore {

struct ListedObject {
  std::string key;
  std::uint64_t size = 0;
};

struct ListPage {
  std::vector<ListedObject> objects;
  std::vector<std::string> prefixes;
  bool truncated = false;
  std::string next_token;
};

// nullopt for a body that is not a ListBucketResult (an error document, a truncated body).
std::optional<ListPage> parse_list_page(std::string_view xml);

// Decodes XML character entities; an unknown or malformed one is kept as written.
std::string xml_unescape(std::string_view s);

}  // namespace stoker::objstore
