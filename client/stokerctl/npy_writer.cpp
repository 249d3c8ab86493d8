#include "npy_writer.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace stoker::ctl {

bool write_npy(const std::string& path, const char* descr, const std::vector<std::uint64_t>& shape,
               const void* data, std::uint64_t bytes, std::string& error) {
  std::string dict = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    dict += std::to_string(shape[i]);
    if (shape.size() == 1 || i + 1 < shape.size()) dict += ",";
    if (i + 1 < shape.size()) dict += " ";
  }
  dict += "), }";
  // magic(6) + version(2) + header length(2) + dict + padding + '\n' is a multiple of 64.
  const std::size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';

  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    error = path + ": " + std::strerror(errno);
    return false;
  }
  const unsigned char head[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                                  static_cast<unsigned char>(dict.size() & 0xff),
                                  static_cast<unsigned char>(dict.size() >> 8)};
  bool ok = std::fwrite(head, 1, sizeof head, f) == sizeof head &&
            std::fwrite(dict.data(), 1, dict.size(), f) == dict.size() &&
            (bytes == 0 || std::fwrite(data, 1, bytes, f) == bytes);
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) error = path + ": write failed";
  return ok;
}

}  // namespace stoker::ctl
