// Runs a fuzz harness over files without libFuzzer (gcc builds, ctest): each argument is a file
// or a folder of files; every file goes through LLVMFuzzerTestOneInput once. The seeds and
// every crash found so far thereby stay regression tests in CI.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::size_t n = 0;
  auto run = [&](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    const std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // Both the bytes as they are and with a selector byte in front (the image harness reads its
    // configuration from the first byte).
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
    for (std::uint8_t sel = 0; sel < 4; ++sel) {
      std::vector<std::uint8_t> with(bytes.size() + 1);
      with[0] = sel;
      std::copy(bytes.begin(), bytes.end(), with.begin() + 1);
      LLVMFuzzerTestOneInput(with.data(), with.size());
    }
    ++n;
  };
  for (int i = 1; i < argc; ++i) {
    const fs::path p(argv[i]);
    if (fs::is_directory(p)) {
      for (const auto& e : fs::recursive_directory_iterator(p)) {
        if (e.is_regular_file()) run(e.path());
      }
    } else {
      run(p);
    }
  }
  std::printf("replayed %zu file(s)\n", n);
  return n > 0 ? 0 : 1;
}
