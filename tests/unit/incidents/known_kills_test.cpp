// The kills a journal holds, as a kill found after the fact looks them up: by boot and kernel log
// sequence number, else by victim and time in the same boot, or by the key of the incident in
// flight a record was made from. Records built in code.
#include <gtest/gtest.h>

#include "headroom/incidents/known_kills.h"
#include "headroom/model/snapshot_json.h"

namespace headroom {
namespace {

OomEvent kill(pid_t victim, std::int64_t at_ns, std::optional<std::uint64_t> seq) {
  OomEvent e;
  e.monotonic_time_ns = at_ns;
  e.kmsg_seq = seq;
  OomVictim v;
  v.pid = v.tgid = victim;
  v.comm = "cuzk";
  e.victims.push_back(v);
  return e;
}

nlohmann::json record(const OomEvent& e, const char* boot) {
  nlohmann::json r = {{"event", toJson(e)}, {"host", {{"hostname", "h"}}}};
  if (boot != nullptr) r["host"]["boot_id"] = boot;
  return r;
}

TEST(KnownKills, ABootAndSequenceNumberNameOneKill) {
  KnownKills k;
  k.add(record(kill(100, 5'000'000'000, 42), "boot-1"));
  EXPECT_TRUE(k.holds(kill(100, 5'000'000'000, 42), "boot-1"));
  EXPECT_TRUE(k.holds(kill(999, 90'000'000'000, 42), "boot-1")) << "the same report, whatever else it says";
  EXPECT_FALSE(k.holds(kill(100, 5'000'000'000, 42), "boot-2")) << "another boot";
  EXPECT_FALSE(k.holds(kill(100, 5'100'000'000, 43), "boot-1")) << "another report: another kill";
}

TEST(KnownKills, WithoutASequenceNumberTheVictimWithinFiveSecondsOfTheSameBoot) {
  KnownKills k;
  k.add(record(kill(100, 5'000'000'000, std::nullopt), "boot-1"));  // BPF's word alone
  EXPECT_TRUE(k.holds(kill(100, 5'300'000'000, 42), "boot-1"));
  EXPECT_FALSE(k.holds(kill(101, 5'300'000'000, 42), "boot-1")) << "another victim";
  EXPECT_FALSE(k.holds(kill(100, 11'000'000'000, 42), "boot-1")) << "too far apart";
  EXPECT_FALSE(k.holds(kill(100, 5'300'000'000, 42), "boot-2"));
  // An older agent's record says no boot: it matches by victim and time.
  KnownKills old;
  old.add(record(kill(100, 5'000'000'000, 42), nullptr));
  EXPECT_TRUE(old.holds(kill(100, 5'300'000'000, std::nullopt), "boot-1"));
}

TEST(KnownKills, RecordsOfOtherKindsAndTheKeyOfAnIncidentInFlight) {
  KnownKills k;
  k.add(nlohmann::json::array());
  k.add({{"event", "not an object"}});
  k.add({{"kind", "probe"}});
  EXPECT_EQ(k.size(), 0u);
  nlohmann::json r = record(kill(100, 1, 7), "boot-1");
  r["key"] = "123-s1-4";
  k.add(r);
  EXPECT_TRUE(k.holdsKey("123-s1-4"));
  EXPECT_FALSE(k.holdsKey("123-s1-5"));
}

TEST(OomEventJson, AnEventReadBackFromItsJsonIsTheSameEvent) {
  OomEvent e = kill(100, 5'000'000'000, 42);
  e.id = 9;
  e.from_bpf = e.from_kmsg = true;
  e.wall_time_ns = 1'700'000'000'000'000'000;
  e.constraint = "CONSTRAINT_MEMCG";
  e.domain_cgroup = "/proving";
  e.domain_limit_bytes = 4ULL << 30;
  e.trigger_pid = 77;
  e.trigger_comm = "cuzk";
  e.found_after = "kernel_log";
  e.victims[0].anon_rss = 3ULL << 30;
  e.victims[0].cgroup = "/proving/prover";
  const nlohmann::json j = toJson(e);
  const OomEvent back = oomEventFromJson(j);
  EXPECT_EQ(toJson(back), j);
  EXPECT_EQ(back.kmsg_seq, 42u);
  EXPECT_EQ(back.found_after, "kernel_log");
  EXPECT_EQ(back.victims.at(0).tgid, 100);
}

}  // namespace
}  // namespace headroom
