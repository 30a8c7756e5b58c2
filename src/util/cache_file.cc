#include "util/cache_file.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <stdexcept>

#include "util/mapped_file.h"

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

bool read_keyed_outcomes(const std::filesystem::path& path, std::string_view key, std::string_view what,
                         const std::function<void(const std::string& name, const nlohmann::json& outcome)>& add) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return true;
  try {
    const auto j = nlohmann::json::parse(read_text_file(path));
    if (j.at("key").get<std::string>() != key) {
      spdlog::warn("ignoring {} {}: it belongs to another key", what, path.string());
      return false;
    }
    for (const auto& [name, outcome] : j.at("outcomes").items()) add(name, outcome);
  } catch (const std::exception& e) {
    spdlog::warn("ignoring corrupt {} {}: {}", what, path.string(), e.what());
    return false;
  }
  return true;
}

void write_keyed_outcomes(const std::filesystem::path& path, std::string_view key, const nlohmann::json& outcomes,
                          std::string_view what) {
  try {
    const nlohmann::json j = {{"key", key}, {"outcomes", outcomes}};
    write_file_atomically(path, j.dump(2) + "\n");
  } catch (const std::exception& e) {
    spdlog::warn("could not write {} {}: {}", what, path.string(), e.what());
  }
}

}  // namespace spindle
