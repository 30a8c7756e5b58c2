// Private to server/: which connections are open, and which one leaves when a new one arrives at
// --max-connections. Plain bookkeeping (no sockets, no Asio), so the admission policy is tested
// alone (tests/server/connection_registry_test.cc); HttpServer::Impl holds one under its mutex.
//
// Admission by progress, not by arrival. A connection is *evictable* while it is idle (between
// requests) or reading a request; it is *busy* (never a victim) from the moment its request is
// complete until its answer is written, SSE streams included. Evictable connections are kept in
// order of their last activity (a request byte read, or becoming idle). At the limit, a new
// connection takes the place of the evictable one that has been inactive the longest, provided it
// has been inactive for at least `grace_s`; otherwise it is an *overflow* connection, which
// answers one request (/health, /metrics; anything else is 503), from a slack of
// `overflow_slack` places. When the slack is full too, the least recently active evictable
// connection of either kind leaves whatever its age, so a flood of slow or idle connections can
// never keep a new client out; only when every open connection is busy is the new one refused.
// An overflow connection whose request is complete (it made progress, where a flood does not)
// is promoted: it takes the place of the least recently active evictable admitted connection,
// whatever its age, and is served; only with every admitted connection busy is it refused (503).
// A client address holding `max_per_client` connections (0: no cap) gets no more.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace spindle::server {

class ConnectionRegistry {
 public:
  using Clock = std::chrono::steady_clock;
  using Id = uint64_t;

  struct Limits {
    int max_connections = 4096;  // admitted (counted) connections
    int overflow_slack = 256;    // overflow connections beyond them
    int max_per_client = 0;      // open connections per client address; 0: no cap
    double grace_s = 1.0;        // inactivity before an evictable connection may be a victim
  };

  enum class Activity { kIdle, kReading, kBusy };
  enum class Kind { kAdmitted, kOverflow, kRefusedFull, kRefusedPerClient };

  // A connection that must be closed to make room, and what it was doing (for the counters).
  struct Victim {
    Id id = 0;
    Activity activity = Activity::kIdle;
  };
  struct Admission {
    Kind kind = Kind::kAdmitted;
    std::optional<Victim> victim;
  };

  explicit ConnectionRegistry(Limits limits) : limits_(limits) {}

  // A new connection from `client` (an address), idle at `now`. On kAdmitted / kOverflow it is
  // registered (remove() it when it closes); a victim, if any, no longer counts and must be closed
  // by the caller if it is still idle or reading. On a refusal nothing is registered.
  Admission admit(Id id, const std::string& client, Clock::time_point now);
  // The connection became idle, read request bytes (kReading: progress), or has a complete
  // request (kBusy). Unknown ids (removed, or a victim) are ignored.
  void set_activity(Id id, Activity activity, Clock::time_point now);
  void remove(Id id);
  // An overflow connection with a complete request becomes admitted (false: every admitted
  // connection is busy); *victim is set when one had to leave for it.
  bool promote(Id id, std::optional<Victim>* victim);

  int num_open() const { return static_cast<int>(entries_.size()); }
  int num_admitted() const { return num_admitted_; }
  int num_idle() const { return num_idle_; }
  // Still holds a place (not removed and not taken as a victim).
  bool holds_place(Id id) const;

 private:
  struct Entry {
    std::string client;
    bool counted = false;  // admitted (inside max_connections), not overflow
    bool victim = false;   // taken to make room: out of every list, waiting for remove()
    Activity activity = Activity::kIdle;
    Clock::time_point since;
    std::list<Id>::iterator lru_it;
  };

  std::list<Id>& lru_of(const Entry& e) { return e.counted ? counted_lru_ : overflow_lru_; }
  void unlink(Entry& e);
  Victim take_victim(std::list<Id>& lru);
  void insert(Id id, const std::string& client, bool counted, Clock::time_point now);
  bool is_stale(const std::list<Id>& lru, Clock::time_point now) const;

  Limits limits_;
  std::unordered_map<Id, Entry> entries_;
  std::unordered_map<std::string, int> per_client_;
  std::list<Id> counted_lru_;   // evictable admitted connections, least recently active first
  std::list<Id> overflow_lru_;  // evictable overflow connections, likewise
  int num_admitted_ = 0;
  int num_idle_ = 0;
};

}  // namespace spindle::server
