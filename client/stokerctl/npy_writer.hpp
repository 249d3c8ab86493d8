// Writes NumPy .npy (format 1.0) files so anyone can look at what a trainer receives.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stoker::ctl {

// descr: "|u1", "<f2", "<f4", "<i8". Returns false and sets `error` on I/O failure.
bool write_npy(const std::string& path, const char* descr, const std::vector<std::uint64_t>& shape,
               const void* data, std::uint64_t bytes, std::string& error);

}  // namespace stoker::ctl
