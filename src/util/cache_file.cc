#include "util/cache_file.h"

#include <fmt/format.h>
#include <unistd.h>

#include <fstream>
#include <stdexcept>

namespace spindle {

uint64_t fnv1a_64(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull;  // the 64-bit offset basis
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  std::filesystem::create_directories(path.parent_path());
  const std::string tmp = path.string() + fmt::format(".tmp{}", ::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out) throw std::runtime_error("write failed");
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace spindle
