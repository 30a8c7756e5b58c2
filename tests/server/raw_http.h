// Raw loopback sockets for the hostile-client tests: bytes no well-behaved HTTP client would send,
// many connections at once, clients that stop reading. Every call is bounded in time.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <string_view>

namespace spindle::testing {

// Raises this process's open-files soft limit to the hard limit; returns the limit now in force.
long raise_fd_limit();

// A connected TCP socket to 127.0.0.1:port (blocking), or -1. rcvbuf > 0 sets SO_RCVBUF first.
int connect_loopback(int port, int rcvbuf = 0);

// Writes all of data unless the peer closes or `timeout` passes; false then.
bool send_all(int fd, std::string_view data, std::chrono::milliseconds timeout = std::chrono::seconds(5));

// Reads until the peer closes, `max_bytes` arrived, or `timeout` passes.
struct RawRead {
  std::string data;
  bool closed = false;     // the peer closed (EOF or reset)
  bool timed_out = false;
};
RawRead read_all(int fd, std::chrono::milliseconds timeout, size_t max_bytes = 1 << 20);

// The status code of "HTTP/1.1 NNN ..." at the start of data, or 0.
int http_status(const std::string& data);
// The body after the head (no chunked decoding).
std::string http_body(const std::string& data);

// From /proc/<pid>/status: the resident set now and its peak (VmRSS, VmHWM), in KiB; -1 if unknown.
long rss_kib(pid_t pid);
long peak_rss_kib(pid_t pid);

// The value of a labelled Prometheus sample such as `name{reason="x"}`, or -1.
double labelled_metric(const std::string& text, const std::string& sample);

}  // namespace spindle::testing
