// Admission by progress (issue 49), without sockets: who gets in at the limit, who leaves, and
// that a connection being answered is never the one closed. Times are explicit (no clock reads).
#include "server/connection_registry.h"

#include <gtest/gtest.h>

namespace spindle::server {
namespace {

using Activity = ConnectionRegistry::Activity;
using Kind = ConnectionRegistry::Kind;
using Clock = ConnectionRegistry::Clock;

Clock::time_point at(double s) { return Clock::time_point{} + std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); }

ConnectionRegistry::Limits limits(int max, int slack, int per_client = 0) {
  return {.max_connections = max, .overflow_slack = slack, .max_per_client = per_client, .grace_s = 1.0};
}

TEST(ConnectionRegistryTest, BelowTheLimitEveryoneIsAdmitted) {
  ConnectionRegistry r(limits(3, 1));
  for (ConnectionRegistry::Id id = 1; id <= 3; ++id) {
    const auto a = r.admit(id, "10.0.0.1", at(0));
    EXPECT_EQ(a.kind, Kind::kAdmitted);
    EXPECT_FALSE(a.victim.has_value());
  }
  EXPECT_EQ(r.num_admitted(), 3);
  EXPECT_EQ(r.num_idle(), 3);
}

// At the limit the connection inactive the longest (beyond the grace) leaves, whether idle or
// stalled mid-request; one that read a byte since is younger.
TEST(ConnectionRegistryTest, AtTheLimitTheLongestStalledLeaves) {
  ConnectionRegistry r(limits(3, 1));
  r.admit(1, "a", at(0));
  r.admit(2, "a", at(0));
  r.admit(3, "a", at(0));
  r.set_activity(1, Activity::kReading, at(0.5));  // a head began, then nothing
  r.set_activity(2, Activity::kReading, at(0.2));
  r.set_activity(3, Activity::kBusy, at(0.3));     // a complete request, being answered
  r.set_activity(2, Activity::kReading, at(0.9));  // 2 made progress after 1 did
  const auto a = r.admit(4, "b", at(3));
  EXPECT_EQ(a.kind, Kind::kAdmitted);
  ASSERT_TRUE(a.victim.has_value());
  EXPECT_EQ(a.victim->id, 1u);
  EXPECT_EQ(a.victim->activity, Activity::kReading);
  EXPECT_FALSE(r.holds_place(1));
  EXPECT_EQ(r.num_admitted(), 3);
  const auto b = r.admit(5, "b", at(3));
  ASSERT_TRUE(b.victim.has_value());
  EXPECT_EQ(b.victim->id, 2u);
}

// Within the grace nobody is closed: the newcomer is an overflow connection; once the slack is
// full the least recently active leaves anyway, and busy connections never do.
TEST(ConnectionRegistryTest, WithinTheGraceNewcomersOverflowThenTheOldestLeaves) {
  ConnectionRegistry r(limits(2, 1));
  r.admit(1, "a", at(0));
  r.admit(2, "a", at(0));
  r.set_activity(1, Activity::kReading, at(0.1));
  r.set_activity(2, Activity::kBusy, at(0.1));
  const auto over = r.admit(3, "a", at(0.5));
  EXPECT_EQ(over.kind, Kind::kOverflow);
  EXPECT_FALSE(over.victim.has_value());
  // Slack full (3 open of 2 + 1): the oldest evictable (1, reading since 0.1) leaves.
  const auto next = r.admit(4, "a", at(0.6));
  EXPECT_EQ(next.kind, Kind::kAdmitted);
  ASSERT_TRUE(next.victim.has_value());
  EXPECT_EQ(next.victim->id, 1u);
  r.remove(1);
  // Now 2 is busy, 3 overflow idle since 0.5, 4 admitted idle since 0.6: 3 is the oldest.
  const auto again = r.admit(5, "a", at(0.7));
  EXPECT_EQ(again.kind, Kind::kOverflow);
  ASSERT_TRUE(again.victim.has_value());
  EXPECT_EQ(again.victim->id, 3u);
}

TEST(ConnectionRegistryTest, WhenEveryConnectionIsBusyTheNewcomerIsRefused) {
  ConnectionRegistry r(limits(2, 1));
  for (ConnectionRegistry::Id id = 1; id <= 3; ++id) {
    r.admit(id, "a", at(0));
    r.set_activity(id, Activity::kBusy, at(0));
  }
  const auto a = r.admit(4, "a", at(10));
  EXPECT_EQ(a.kind, Kind::kRefusedFull);
  EXPECT_EQ(r.num_open(), 3);
  r.remove(3);
  EXPECT_EQ(r.admit(4, "a", at(10)).kind, Kind::kOverflow);
}

// An overflow connection that completes its request takes the place of the least recently
// active admitted one, however recent; with every admitted connection busy it stays refused.
TEST(ConnectionRegistryTest, ACompleteRequestOnAnOverflowConnectionIsPromoted) {
  ConnectionRegistry r(limits(2, 2));
  r.admit(1, "a", at(0));
  r.admit(2, "a", at(0));
  r.set_activity(1, Activity::kReading, at(0.2));
  r.set_activity(2, Activity::kReading, at(0.3));
  EXPECT_EQ(r.admit(3, "a", at(0.4)).kind, Kind::kOverflow);
  r.set_activity(3, Activity::kBusy, at(0.41));
  std::optional<ConnectionRegistry::Victim> victim;
  ASSERT_TRUE(r.promote(3, &victim));
  ASSERT_TRUE(victim.has_value());
  EXPECT_EQ(victim->id, 1u);
  EXPECT_EQ(r.num_admitted(), 2);
  // Now 2 reading, 3 busy: a second promotion takes 2; a third finds only busy ones.
  EXPECT_EQ(r.admit(4, "a", at(0.5)).kind, Kind::kOverflow);
  r.set_activity(4, Activity::kBusy, at(0.5));
  victim.reset();
  ASSERT_TRUE(r.promote(4, &victim));
  EXPECT_EQ(victim->id, 2u);
  r.remove(1);
  r.remove(2);
  EXPECT_EQ(r.admit(5, "a", at(0.6)).kind, Kind::kOverflow);
  r.set_activity(5, Activity::kBusy, at(0.6));
  victim.reset();
  EXPECT_FALSE(r.promote(5, &victim));
  EXPECT_FALSE(victim.has_value());
}

TEST(ConnectionRegistryTest, PerClientCapCountsOpenConnectionsPerAddress) {
  ConnectionRegistry r(limits(100, 10, /*per_client=*/2));
  EXPECT_EQ(r.admit(1, "127.0.0.1", at(0)).kind, Kind::kAdmitted);
  EXPECT_EQ(r.admit(2, "127.0.0.1", at(0)).kind, Kind::kAdmitted);
  EXPECT_EQ(r.admit(3, "127.0.0.1", at(0)).kind, Kind::kRefusedPerClient);  // loopback is no exception
  EXPECT_EQ(r.admit(4, "127.0.0.2", at(0)).kind, Kind::kAdmitted);
  r.remove(1);
  EXPECT_EQ(r.admit(5, "127.0.0.1", at(0)).kind, Kind::kAdmitted);
  EXPECT_EQ(r.num_open(), 3);
}

// A victim still counts as open until its socket closes, and its late activity changes nothing.
TEST(ConnectionRegistryTest, AVictimHoldsNoPlaceButStaysOpenUntilRemoved) {
  ConnectionRegistry r(limits(1, 1));
  r.admit(1, "a", at(0));
  const auto a = r.admit(2, "a", at(5));
  ASSERT_TRUE(a.victim.has_value());
  EXPECT_EQ(r.num_open(), 2);
  EXPECT_EQ(r.num_admitted(), 1);
  r.set_activity(1, Activity::kBusy, at(5.1));
  r.set_activity(1, Activity::kIdle, at(5.2));
  EXPECT_EQ(r.num_idle(), 1);  // only 2
  r.remove(1);
  EXPECT_EQ(r.num_open(), 1);
  EXPECT_EQ(r.num_admitted(), 1);
}

}  // namespace
}  // namespace spindle::server
