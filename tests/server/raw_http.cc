#include "raw_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

namespace spindle::testing {

using Clock = std::chrono::steady_clock;

long raise_fd_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return -1;
  lim.rlim_cur = lim.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &lim);
  ::getrlimit(RLIMIT_NOFILE, &lim);
  return static_cast<long>(lim.rlim_cur);
}

int connect_loopback(int port, int rcvbuf) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, std::string_view data, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!data.empty()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

RawRead read_all(int fd, std::chrono::milliseconds timeout, size_t max_bytes) {
  RawRead r;
  const auto deadline = Clock::now() + timeout;
  char buf[16384];
  while (r.data.size() < max_bytes) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      r.timed_out = true;
      break;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      r.data.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      r.closed = true;
      break;
    }
  }
  return r;
}

int http_status(const std::string& data) {
  if (data.size() < 12 || data.compare(0, 5, "HTTP/") != 0) return 0;
  try {
    return std::stoi(data.substr(9, 3));
  } catch (const std::exception&) {
    return 0;
  }
}

std::string http_body(const std::string& data) {
  const size_t end = data.find("\r\n\r\n");
  return end == std::string::npos ? "" : data.substr(end + 4);
}

namespace {

long proc_status_kib(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.compare(0, key.size(), key) == 0 && line.size() > key.size() && line[key.size()] == ':') {
      std::stringstream ss(line.substr(key.size() + 1));
      long kib = -1;
      ss >> kib;
      return kib;
    }
  }
  return -1;
}

}  // namespace

long rss_kib(pid_t pid) { return proc_status_kib(pid, "VmRSS"); }
long peak_rss_kib(pid_t pid) { return proc_status_kib(pid, "VmHWM"); }

double labelled_metric(const std::string& text, const std::string& sample) {
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) {
    if (line.compare(0, sample.size(), sample) == 0 && line.size() > sample.size() && line[sample.size()] == ' ') {
      try {
        return std::stod(line.substr(sample.size() + 1));
      } catch (const std::exception&) {
        return -1;
      }
    }
  }
  return -1;
}

}  // namespace spindle::testing
