#include "server/connection_registry.h"

namespace spindle::server {

bool ConnectionRegistry::is_stale(const std::list<Id>& lru, Clock::time_point now) const {
  if (lru.empty()) return false;
  const Entry& e = entries_.at(lru.front());
  return std::chrono::duration<double>(now - e.since).count() >= limits_.grace_s;
}

void ConnectionRegistry::unlink(Entry& e) {
  if (e.activity != Activity::kBusy && !e.victim) lru_of(e).erase(e.lru_it);
  if (e.activity == Activity::kIdle && !e.victim) --num_idle_;
}

ConnectionRegistry::Victim ConnectionRegistry::take_victim(std::list<Id>& lru) {
  const Id id = lru.front();
  Entry& e = entries_.at(id);
  unlink(e);
  e.victim = true;
  if (e.counted) --num_admitted_;
  e.counted = false;
  return Victim{id, e.activity};
}

void ConnectionRegistry::insert(Id id, const std::string& client, bool counted, Clock::time_point now) {
  Entry& e = entries_[id];
  e.client = client;
  e.counted = counted;
  e.activity = Activity::kIdle;
  e.since = now;
  auto& lru = lru_of(e);
  e.lru_it = lru.insert(lru.end(), id);
  ++num_idle_;
  if (counted) ++num_admitted_;
  ++per_client_[client];
}

ConnectionRegistry::Admission ConnectionRegistry::admit(Id id, const std::string& client, Clock::time_point now) {
  if (limits_.max_per_client > 0) {
    const auto it = per_client_.find(client);
    if (it != per_client_.end() && it->second >= limits_.max_per_client) return {Kind::kRefusedPerClient, {}};
  }
  Admission a;
  if (num_admitted_ < limits_.max_connections) {
    a.kind = Kind::kAdmitted;
  } else if (is_stale(counted_lru_, now)) {
    a.kind = Kind::kAdmitted;
    a.victim = take_victim(counted_lru_);
  } else if (num_open() < limits_.max_connections + limits_.overflow_slack) {
    a.kind = Kind::kOverflow;
  } else if (!counted_lru_.empty() || !overflow_lru_.empty()) {
    // The slack is full: the least recently active evictable connection leaves, whatever its age.
    const bool take_counted =
        overflow_lru_.empty() ||
        (!counted_lru_.empty() && entries_.at(counted_lru_.front()).since <= entries_.at(overflow_lru_.front()).since);
    a.kind = take_counted ? Kind::kAdmitted : Kind::kOverflow;
    a.victim = take_victim(take_counted ? counted_lru_ : overflow_lru_);
  } else {
    return {Kind::kRefusedFull, {}};
  }
  insert(id, client, a.kind == Kind::kAdmitted, now);
  return a;
}

void ConnectionRegistry::set_activity(Id id, Activity activity, Clock::time_point now) {
  const auto it = entries_.find(id);
  if (it == entries_.end() || it->second.victim) return;
  Entry& e = it->second;
  unlink(e);
  e.activity = activity;
  e.since = now;
  if (activity == Activity::kBusy) return;
  auto& lru = lru_of(e);
  e.lru_it = lru.insert(lru.end(), id);
  if (activity == Activity::kIdle) ++num_idle_;
}

void ConnectionRegistry::remove(Id id) {
  const auto it = entries_.find(id);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  unlink(e);
  if (e.counted) --num_admitted_;
  if (auto c = per_client_.find(e.client); c != per_client_.end() && --c->second == 0) per_client_.erase(c);
  entries_.erase(it);
}

bool ConnectionRegistry::promote(Id id, std::optional<Victim>* victim) {
  const auto it = entries_.find(id);
  if (it == entries_.end() || it->second.victim) return false;
  Entry& e = it->second;
  if (e.counted) return true;
  if (num_admitted_ >= limits_.max_connections) {
    if (counted_lru_.empty()) return false;
    *victim = take_victim(counted_lru_);
  }
  unlink(e);  // out of the overflow list (a complete request is busy anyway)
  e.counted = true;
  ++num_admitted_;
  if (e.activity != Activity::kBusy) {
    e.lru_it = counted_lru_.insert(counted_lru_.end(), id);
    if (e.activity == Activity::kIdle) ++num_idle_;
  }
  return true;
}

bool ConnectionRegistry::holds_place(Id id) const {
  const auto it = entries_.find(id);
  return it != entries_.end() && !it->second.victim;
}

}  // namespace spindle::server
