#include "support/gunzipped_file.h"

#include <stdlib.h>  // mkstemps
#include <unistd.h>  // write, close
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "util/error.h"

namespace spindle::testing {
namespace {

// Creates an empty temporary file whose name ends in `suffix`; returns its path and open descriptor.
std::pair<std::filesystem::path, int> make_temp(const std::string& suffix) {
  std::string name = (std::filesystem::temp_directory_path() / ("spindle-test-XXXXXX-" + suffix)).string();
  std::vector<char> buffer(name.begin(), name.end());
  buffer.push_back('\0');
  const int fd = mkstemps(buffer.data(), static_cast<int>(suffix.size() + 1));  // +1: the '-'
  SPINDLE_CHECK(fd >= 0, "cannot create a temporary file {}: {}", name, std::strerror(errno));
  return {std::filesystem::path(buffer.data()), fd};
}

// Writes all of the gzip stream `gz` to `fd`; throws naming `gz_path` on a read or write error.
void copy_out(gzFile gz, int fd, const std::filesystem::path& gz_path, const std::filesystem::path& out) {
  std::vector<char> chunk(1 << 20);
  for (;;) {
    const int n = gzread(gz, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int code = 0;
      const char* message = gzerror(gz, &code);
      SPINDLE_FAIL("{}: gzip data is corrupt: {}", gz_path.string(), message ? message : "?");
    }
    if (n == 0) {
      // gzread returns 0 at the end of a complete stream; a cut one sets Z_BUF_ERROR.
      int code = 0;
      const char* message = gzerror(gz, &code);
      SPINDLE_CHECK(code == Z_OK, "{}: gzip data is truncated: {}", gz_path.string(), message ? message : "?");
      return;
    }
    for (int done = 0; done < n;) {
      const ssize_t w = ::write(fd, chunk.data() + done, static_cast<size_t>(n - done));
      SPINDLE_CHECK(w > 0, "cannot write {}: {}", out.string(), std::strerror(errno));
      done += static_cast<int>(w);
    }
  }
}

}  // namespace

GunzippedFile::GunzippedFile(const std::filesystem::path& gz_path) {
  SPINDLE_CHECK(gz_path.extension() == ".gz", "{}: expected a file name ending in .gz", gz_path.string());
  SPINDLE_CHECK(std::filesystem::is_regular_file(gz_path), "{}: no such file", gz_path.string());
  gzFile gz = gzopen(gz_path.c_str(), "rb");
  SPINDLE_CHECK(gz != nullptr, "{}: cannot open: {}", gz_path.string(), std::strerror(errno));
  auto [out, fd] = make_temp(gz_path.stem().string());
  path_ = out;
  try {
    copy_out(gz, fd, gz_path, out);
  } catch (...) {
    gzclose(gz);
    ::close(fd);
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
    throw;
  }
  gzclose(gz);
  SPINDLE_CHECK(::close(fd) == 0, "cannot write {}: {}", out.string(), std::strerror(errno));
}

GunzippedFile::~GunzippedFile() {
  if (path_.empty()) return;
  std::error_code ignored;
  std::filesystem::remove(path_, ignored);
}

GunzippedFile::GunzippedFile(GunzippedFile&& other) noexcept : path_(std::exchange(other.path_, {})) {}

GunzippedFile& GunzippedFile::operator=(GunzippedFile&& other) noexcept {
  if (this != &other) {
    if (!path_.empty()) {
      std::error_code ignored;
      std::filesystem::remove(path_, ignored);
    }
    path_ = std::exchange(other.path_, {});
  }
  return *this;
}

}  // namespace spindle::testing
