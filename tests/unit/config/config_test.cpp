#include "headroom/config/config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <initializer_list>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "testing/fixture_tree.h"

namespace headroom {
namespace {

using std::chrono::milliseconds;

constexpr std::string_view kSource = "/x.toml";

// Passes when `toml` is rejected with a message that holds every one of `parts`.
::testing::AssertionResult rejects(std::string_view toml, std::initializer_list<std::string_view> parts) {
  auto r = parseAgentConfig(toml, kSource);
  if (r) return ::testing::AssertionFailure() << "accepted:\n" << toml;
  const std::string& msg = r.error().message;
  if (r.error().code != 0) return ::testing::AssertionFailure() << "code " << r.error().code << ": " << msg;
  if (msg.rfind(std::string(kSource) + ": ", 0) != 0)
    return ::testing::AssertionFailure() << "does not start with the source: " << msg;
  for (std::string_view p : parts)
    if (msg.find(p) == std::string::npos) return ::testing::AssertionFailure() << "no \"" << p << "\" in: " << msg;
  return ::testing::AssertionSuccess() << msg;
}

const ConfigKey& keyNamed(std::string_view name) {
  for (const ConfigKey& k : configKeys())
    if (k.name == name) return k;
  ADD_FAILURE() << "no key " << name;
  return configKeys().front();
}

// Passes when the flag is rejected with a message that holds every one of `parts`.
::testing::AssertionResult flagRejects(std::string_view name, const std::vector<std::string>& values,
                                       std::initializer_list<std::string_view> parts) {
  AgentConfig cfg;
  auto st = applyConfigFlag(cfg, keyNamed(name), values);
  if (st) return ::testing::AssertionFailure() << "accepted " << name;
  const std::string& msg = st.error().message;
  for (std::string_view p : parts)
    if (msg.find(p) == std::string::npos) return ::testing::AssertionFailure() << "no \"" << p << "\" in: " << msg;
  return ::testing::AssertionSuccess() << msg;
}

constexpr std::string_view kFull = R"(
listen = "0.0.0.0:9500"
interval = "1.5s"
cgroups = ["/system.slice/curio.service", "prover//"]
smaps = false
pss_max_age = "2m"
pss_step = "16MiB"
pss_reads_per_second = 200
max_processes = 500
process_walk_budget = "2ms"
process_walk_max_interval = "30s"
log_format = "json"
log_level = "debug"

[roles]
rules = ["prover=comm:cuzk", "colocated=cgroup:/curio"]

[sensors]
bpf = false
kmsg = false
tasks = false
faults = false
mmap = false
rss = false
cuda = false
cuda_libraries = ["/usr/lib/x86_64-linux-gnu/libcuda.so.1"]
cuda_runtime_targets = ["/opt/a/libcudart.so.12", "/opt/b/prover"]
nvml = false
nvml_library = "/opt/nvidia/lib/libnvidia-ml.so.1"
oom_ring_bytes = "1MiB"
exit_ring_bytes = 65536
max_processes = 1000
max_cuda_allocations = 2000
max_tracked_cgroups = 300

[metrics]
top_processes = 5
max_cgroups = 64
max_series = 5000
recent_ooms = 32

[probe]
enabled = true
min_interval = "90s"
cgroup = "/prover/"

[warning]
enabled = false
eta = "45s"
window = "1m"
fast_interval = "250ms"
on_warning = "signal:USR2"

[budget]
enabled = false
cgroup = "/system.slice/prover.service/"
margin_floor = "512MiB"
margin_growth = 2
margin_step = "128MiB"
overhead_factor = 1.25
give_back_after = 5
clean_period = "30m"
growth_window = "2m"
forecast_horizon = "20s"
probe_max_age = 600
hysteresis = "64MiB"
state_file = "/var/lib/prover/budget.json"
file = "/run/prover/budget"

[journal]
enabled = false
path = "/srv/headroom/journal.hrj"
max_bytes = "8MiB"
flight_window = "2m"
catch_up = "restarts"

[workloads]
docker_socket = ""
podman_socket = "/run/podman/alt.sock"
kubernetes_logs = false

[events]
output = "/var/log/headroom/events.jsonl"
max_bytes = "1MiB"
max_files = 3
journald = "off"

[prover]
self_report = "http://127.0.0.1:9000/metrics#metric:cuzk_used_bytes"

[web]
config_file = ""
)";

TEST(ConfigParse, JournalAndSelfReportBadValuesNameTheKey) {
  for (auto [doc, says] : std::vector<std::pair<std::string, std::string>>{
           {"[journal]\npath = \"relative.hrj\"\n", "journal.path"},
           {"[journal]\nmax_bytes = \"4KiB\"\n", "must be at least 1MiB"},
           {"[journal]\nflight_window = \"1s\"\n", "must be between 5s and 1h"},
           {"[journal]\ncatch_up = \"always\"\n", "journal.catch_up"},
           {"[events]\noutput = \"events.jsonl\"\n",
            R"(events.output = "events.jsonl": must be "stdout", an absolute file path, or "" for none)"},
           {"[events]\noutput = \"/var/log/\"\n", "events.output"},
           {"[events]\nmax_bytes = \"1KiB\"\n", "events.max_bytes = \"1KiB\": must be at least 4KiB"},
           {"[events]\nmax_files = 101\n", "events.max_files"},
           {"[events]\njournald = \"yes\"\n", "events.journald = \"yes\": must be one of auto, on, off"},
           {"[prover]\nself_report = \"https://x/m\"\n", "https is not supported"},
           {"[prover]\nself_report = \"/run/x#xml:a\"\n", "prover.self_report"},
       }) {
    auto r = parseAgentConfig(doc, kSource);
    ASSERT_FALSE(r) << doc;
    EXPECT_NE(r.error().describe().find(says), std::string::npos) << r.error().describe();
  }
}

TEST(ConfigParse, FullFileSetsEveryKey) {
  auto r = parseAgentConfig(kFull, kSource);
  ASSERT_TRUE(r) << r.error().describe();
  const AgentConfig& c = *r;
  EXPECT_EQ(c.listen.host, "0.0.0.0");
  EXPECT_EQ(c.listen.port, 9500);
  EXPECT_EQ(c.interval, milliseconds(1500));
  EXPECT_EQ(c.cgroups, (std::vector<std::string>{"/system.slice/curio.service", "/prover"}));
  EXPECT_FALSE(c.smaps);
  EXPECT_EQ(c.pss_max_age, std::chrono::minutes(2));
  EXPECT_EQ(c.pss_step, 16ULL << 20);
  EXPECT_EQ(c.pss_reads_per_second, 200u);
  EXPECT_FALSE(c.sensors.tasks);
  EXPECT_EQ(c.max_processes, 500u);
  EXPECT_EQ(c.process_walk_budget, milliseconds(2));
  EXPECT_EQ(c.process_walk_max_interval, std::chrono::seconds(30));
  EXPECT_EQ(c.log_format, LogFormat::kJson);
  EXPECT_EQ(c.log_level, "debug");
  ASSERT_EQ(c.role_rules.size(), 2u);
  EXPECT_EQ(c.role_rules[0].text(), "prover=comm:cuzk");
  EXPECT_EQ(c.role_rules[1].text(), "colocated=cgroup:/curio");
  const SensorsConfig& s = c.sensors;
  EXPECT_FALSE(s.bpf);
  EXPECT_FALSE(s.kmsg);
  EXPECT_FALSE(s.faults);
  EXPECT_FALSE(s.mmap);
  EXPECT_FALSE(s.rss);
  EXPECT_FALSE(s.cuda);
  EXPECT_EQ(s.cuda_libraries, (std::vector<std::string>{"/usr/lib/x86_64-linux-gnu/libcuda.so.1"}));
  EXPECT_EQ(s.cuda_runtime_targets, (std::vector<std::string>{"/opt/a/libcudart.so.12", "/opt/b/prover"}));
  EXPECT_FALSE(s.nvml);
  EXPECT_EQ(s.nvml_library, "/opt/nvidia/lib/libnvidia-ml.so.1");
  EXPECT_EQ(s.oom_ring_bytes, 1u << 20);
  EXPECT_EQ(s.exit_ring_bytes, 65536u);
  EXPECT_EQ(s.max_processes, 1000u);
  EXPECT_EQ(s.max_cuda_allocations, 2000u);
  EXPECT_EQ(s.max_tracked_cgroups, 300u);
  EXPECT_EQ(c.top_processes, 5u);
  EXPECT_EQ(c.max_cgroups, 64u);
  EXPECT_EQ(c.max_series, 5000u);
  EXPECT_EQ(c.recent_ooms, 32u);
  EXPECT_TRUE(c.probe_enabled);
  EXPECT_EQ(c.probe_min_interval, milliseconds(90000));
  EXPECT_EQ(c.probe_cgroup, "/prover");
  EXPECT_FALSE(c.warning.enabled);
  EXPECT_EQ(c.warning.eta, std::chrono::seconds(45));
  EXPECT_EQ(c.warning.window, std::chrono::minutes(1));
  EXPECT_EQ(c.warning.fast_interval, std::chrono::milliseconds(250));
  EXPECT_EQ(c.warning.on_warning, "signal:USR2");
  EXPECT_EQ(c.budget.policy.forecast_horizon, std::chrono::seconds(20));
  const BudgetConfig& b = c.budget;
  EXPECT_FALSE(b.enabled);
  EXPECT_EQ(b.cgroup, "/system.slice/prover.service");
  EXPECT_EQ(b.policy.margin_floor, 512u << 20);
  EXPECT_EQ(b.policy.margin_growth, 2.0);
  EXPECT_EQ(b.policy.margin_step, 128u << 20);
  EXPECT_EQ(b.policy.overhead_factor, 1.25);
  EXPECT_EQ(b.policy.give_back_after, 5u);
  EXPECT_EQ(b.policy.clean_period, milliseconds(30 * 60 * 1000));
  EXPECT_EQ(b.policy.growth_window, milliseconds(120000));
  EXPECT_EQ(b.policy.probe_max_age, milliseconds(600000));
  EXPECT_EQ(b.policy.hysteresis_bytes, 64u << 20);
  EXPECT_EQ(b.state_file, "/var/lib/prover/budget.json");
  EXPECT_EQ(b.file, "/run/prover/budget");
  EXPECT_FALSE(c.journal.enabled);
  EXPECT_EQ(c.journal.path, "/srv/headroom/journal.hrj");
  EXPECT_EQ(c.journal.max_bytes, 8u << 20);
  EXPECT_EQ(c.journal.flight_window, milliseconds(120000));
  EXPECT_EQ(c.journal.catch_up, JournalCatchUp::kRestarts);
  EXPECT_EQ(c.workloads.docker_socket, "");
  EXPECT_EQ(c.workloads.podman_socket, "/run/podman/alt.sock");
  EXPECT_FALSE(c.workloads.kubernetes_logs);
  EXPECT_EQ(c.events.output, "/var/log/headroom/events.jsonl");
  EXPECT_EQ(c.events.max_bytes, 1u << 20);
  EXPECT_EQ(c.events.max_files, 3u);
  EXPECT_EQ(c.events.journald, JournaldMode::kOff);
  EXPECT_EQ(c.self_report, "http://127.0.0.1:9000/metrics#metric:cuzk_used_bytes");
  // Not config keys: `headroom run`'s retries, and the relative hysteresis.
  EXPECT_EQ(b.policy.max_retries, BudgetPolicy{}.max_retries);
  EXPECT_EQ(b.policy.hysteresis_fraction, BudgetPolicy{}.hysteresis_fraction);
}

TEST(ConfigParse, EveryTableKeyIsInTheFullFile) {
  // So that FullFileSetsEveryKey really covers every key there is.
  for (const ConfigKey& k : configKeys()) {
    std::string_view leaf = k.name;
    if (auto dot = leaf.rfind('.'); dot != std::string_view::npos) leaf = leaf.substr(dot + 1);
    EXPECT_NE(kFull.find(fmt::format("\n{} = ", leaf)), std::string_view::npos) << k.name;
  }
}

TEST(ConfigParse, EmptyDocumentGivesTheDefaults) {
  for (std::string_view doc : {"", "# nothing\n", "[sensors]\n[metrics]\n[roles]\n"}) {
    auto r = parseAgentConfig(doc, kSource);
    ASSERT_TRUE(r) << r.error().describe();
    const AgentConfig d;
    EXPECT_EQ(r->listen.text(), "127.0.0.1:9464");
    EXPECT_EQ(r->interval, milliseconds(5000));
    EXPECT_TRUE(r->cgroups.empty());
    EXPECT_TRUE(r->role_rules.empty());
    EXPECT_EQ(r->smaps, d.smaps);
    EXPECT_EQ(r->max_processes, d.max_processes);
    EXPECT_EQ(r->log_format, LogFormat::kText);
    EXPECT_EQ(r->log_level, "info");
    EXPECT_EQ(r->sensors, d.sensors);
    EXPECT_EQ(r->top_processes, d.top_processes);
    EXPECT_EQ(r->max_cgroups, d.max_cgroups);
    EXPECT_EQ(r->max_series, d.max_series);
    EXPECT_EQ(r->recent_ooms, d.recent_ooms);
    EXPECT_EQ(r->budget, d.budget);
    EXPECT_TRUE(r->budget.enabled);
    EXPECT_TRUE(r->budget.cgroup.empty());
    EXPECT_TRUE(r->budget.state_file.empty());
    EXPECT_TRUE(r->budget.file.empty());
    EXPECT_EQ(r->budget.policy, BudgetPolicy{}) << "the controller's defaults";
  }
}

TEST(ConfigParse, ValueForms) {
  auto r = parseAgentConfig(R"(
interval = 2
listen = "[::1]:0"
log_level = "error"
metrics.recent_ooms = 3
[sensors]
oom_ring_bytes = "4KiB"
exit_ring_bytes = "2 MiB"
)",
                            kSource);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->interval, milliseconds(2000));
  EXPECT_EQ(r->listen.host, "::1");
  EXPECT_EQ(r->listen.port, 0);
  EXPECT_EQ(r->sensors.oom_ring_bytes, 4096u);
  EXPECT_EQ(r->sensors.exit_ring_bytes, 2u << 20);
  EXPECT_EQ(r->recent_ooms, 3u);
  auto f = parseAgentConfig("interval = 0.25\ncgroups = []\n", kSource);
  ASSERT_TRUE(f) << f.error().describe();
  EXPECT_EQ(f->interval, milliseconds(250));
  EXPECT_TRUE(f->cgroups.empty());
}

TEST(ConfigErrors, UnknownKeys) {
  EXPECT_TRUE(rejects("intreval = \"5s\"\n", {"unknown key \"intreval\"", "known at the top level: listen, interval",
                                              "[sensors]", "did you mean \"interval\""}));
  EXPECT_TRUE(rejects("[sensors]\nbfp = true\n", {"unknown key \"sensors.bfp\"", "known in [sensors]: bpf, kmsg",
                                                  "did you mean \"sensors.bpf\""}));
  EXPECT_TRUE(rejects("bpf = false\n", {"unknown key \"bpf\"", "did you mean \"sensors.bpf\""}));
  EXPECT_TRUE(rejects("[metrics]\ntop = 3\n", {"unknown key \"metrics.top\"", "known in [metrics]: top_processes"}));
  EXPECT_TRUE(rejects("[sensors.tracepoints]\nfaults = \"x\"\n", {"unknown key \"sensors.tracepoints\""}));
  EXPECT_TRUE(rejects("[roles]\nrule = []\n", {"unknown key \"roles.rule\"", "known in [roles]: rules"}));
}

TEST(ConfigErrors, UnknownTableAndTableShape) {
  EXPECT_TRUE(rejects("[sensor]\nbpf = true\n", {"unknown table [sensor]", "[roles], [sensors], [metrics]"}));
  EXPECT_TRUE(rejects("sensors = 5\n", {"sensors = 5", "must be a table"}));
  EXPECT_TRUE(rejects("[interval]\n", {"interval = {}", "must be a duration"}));
}

TEST(ConfigErrors, FirstErrorInFileOrder) {
  // toml++ sorts keys; the error reported is still the first one in the file.
  EXPECT_TRUE(rejects("zzz = 1\naaa = 2\n", {"\"zzz\""}));
}

TEST(ConfigErrors, WrongTypes) {
  EXPECT_TRUE(rejects("smaps = \"yes\"\n", {"smaps = \"yes\": must be a boolean (true or false)"}));
  EXPECT_TRUE(rejects("max_processes = \"many\"\n", {"max_processes = \"many\"", "must be an integer from 1 to"}));
  EXPECT_TRUE(rejects("max_processes = 0\n", {"max_processes = 0", "from 1 to 16777216"}));
  EXPECT_TRUE(rejects("process_walk_budget = \"2s\"\n", {"process_walk_budget = \"2s\"", "between 0s and 1s"}));
  EXPECT_TRUE(rejects("process_walk_max_interval = \"500ms\"\n",
                      {"process_walk_max_interval = \"500ms\"", "between 1s and 1h"}));
  EXPECT_TRUE(rejects("max_processes = -3\n", {"max_processes = -3", "must be an integer"}));
  EXPECT_TRUE(rejects("[metrics]\nmax_series = 99\n", {"metrics.max_series = 99", "from 100 to"}));
  EXPECT_TRUE(rejects("[sensors]\nmax_processes = 16777217\n", {"sensors.max_processes = 16777217"}));
  EXPECT_TRUE(rejects("listen = 9464\n", {"listen = 9464", "must be a string"}));
  EXPECT_TRUE(rejects("cgroups = \"/a\"\n", {"cgroups = \"/a\"", "must be an array"}));
  EXPECT_TRUE(rejects("cgroups = [1]\n", {"cgroups[0] = 1", "cgroup path"}));
  EXPECT_TRUE(rejects("interval = true\n", {"interval = true", "must be a duration"}));
  EXPECT_TRUE(rejects("log_format = 1.5\n", {"log_format = 1.5", "must be one of text, json"}));
  EXPECT_TRUE(rejects("[roles]\nrules = [\"prover=comm:a\", 7]\n", {"roles.rules[1] = 7", "must be a string"}));
}

TEST(ConfigErrors, Sizes) {
  EXPECT_TRUE(
      rejects("[sensors]\noom_ring_bytes = 1000\n",
              {"/x.toml: sensors.oom_ring_bytes = 1000: must be a power of two, at least 4096 (e.g. \"256KiB\")"}));
  EXPECT_TRUE(rejects("[sensors]\noom_ring_bytes = 12288\n", {"oom_ring_bytes = 12288", "power of two"}));
  EXPECT_TRUE(rejects("[sensors]\nexit_ring_bytes = 2048\n", {"exit_ring_bytes = 2048", "at least 4096"}));
  EXPECT_TRUE(rejects("[sensors]\nexit_ring_bytes = \"2GiB\"\n", {"exit_ring_bytes = \"2GiB\"", "at most 1GiB"}));
  EXPECT_TRUE(rejects("[sensors]\nexit_ring_bytes = \"lots\"\n", {"exit_ring_bytes = \"lots\"", "not a size"}));
  EXPECT_TRUE(rejects("[sensors]\nexit_ring_bytes = -4096\n", {"exit_ring_bytes = -4096", "not a size"}));
  EXPECT_TRUE(rejects("[sensors]\nexit_ring_bytes = 4096.0\n", {"exit_ring_bytes = 4096.0", "not a size"}));
}

TEST(ConfigErrors, Durations) {
  EXPECT_TRUE(rejects("interval = \"fast\"\n",
                      {"/x.toml: interval = \"fast\": not a duration (use e.g. \"5s\", \"500ms\", \"1m\")"}));
  EXPECT_TRUE(rejects("interval = \"5x\"\n", {"interval = \"5x\"", "unknown unit \"x\""}));
  EXPECT_TRUE(rejects("interval = \"-5s\"\n", {"interval = \"-5s\"", "negative"}));
  EXPECT_TRUE(rejects("interval = -5\n", {"interval = -5", "negative"}));
  EXPECT_TRUE(rejects("interval = \"50ms\"\n", {"interval = \"50ms\"", "between 100ms and 1h"}));
  EXPECT_TRUE(rejects("interval = \"2h\"\n", {"interval = \"2h\"", "between 100ms and 1h"}));
  EXPECT_TRUE(rejects("interval = 0\n", {"interval = 0", "between 100ms and 1h"}));
  EXPECT_TRUE(rejects("interval = \"\"\n", {"interval = \"\"", "empty"}));
}

TEST(ConfigErrors, ListenAddresses) {
  EXPECT_TRUE(rejects("listen = \"127.0.0.1\"\n", {"listen = \"127.0.0.1\"", "no port", "ADDR:PORT"}));
  EXPECT_TRUE(rejects("listen = \"127.0.0.1:70000\"\n", {"listen = \"127.0.0.1:70000\"", "\"70000\"", "0 to 65535"}));
  EXPECT_TRUE(
      rejects("listen = \"%%garbage%%:80\"\n", {"listen = \"%%garbage%%:80\"", "not an IP address or host name"}));
  EXPECT_TRUE(rejects("listen = \"::1:9464\"\n", {"listen = \"::1:9464\"", "in brackets"}));
}

TEST(ConfigErrors, RoleRulesPathsAndEnums) {
  EXPECT_TRUE(rejects("[roles]\nrules = [\"prover=comm:cuzk\", \"bogus\"]\n",
                      {"roles.rules[1] = \"bogus\"", "ROLE=KIND:VALUE"}));
  EXPECT_TRUE(rejects("[roles]\nrules = [\"boss=comm:x\"]\n",
                      {"roles.rules[0] = \"boss=comm:x\"", "prover, colocated, system"}));
  EXPECT_TRUE(rejects("[sensors]\ncuda_libraries = [\"lib/libcuda.so.1\"]\n",
                      {"sensors.cuda_libraries[0] = \"lib/libcuda.so.1\"", "must be an absolute path"}));
  EXPECT_TRUE(rejects("[sensors]\ncuda_runtime_targets = [\"\"]\n",
                      {"sensors.cuda_runtime_targets[0] = \"\"", "absolute path"}));
  EXPECT_TRUE(rejects("log_format = \"json2\"\n", {"log_format = \"json2\": must be one of text, json"}));
  EXPECT_TRUE(rejects("log_level = \"verbose\"\n", {"log_level = \"verbose\"", "trace, debug, info, warn, error"}));
  EXPECT_TRUE(rejects("cgroups = [\"\"]\n", {"cgroups[0] = \"\"", "cgroup path"}));
}

TEST(ConfigErrors, Budget) {
  // Every value the controller refuses is refused here, with the key and the value.
  EXPECT_TRUE(rejects("[budget]\nmargin_growth = 0.9\n", {"budget.margin_growth = 0.9: must be between 1 and 100"}));
  EXPECT_TRUE(rejects("[budget]\nmargin_growth = \"fast\"\n", {"budget.margin_growth = \"fast\"", "must be a number"}));
  EXPECT_TRUE(rejects("[budget]\nmargin_growth = nan\n", {"budget.margin_growth = nan", "must be a number"}));
  EXPECT_TRUE(rejects("[budget]\noverhead_factor = 200\n", {"budget.overhead_factor = 200", "between 1 and 100"}));
  EXPECT_TRUE(rejects("[budget]\nmargin_floor = \"lots\"\n", {"budget.margin_floor = \"lots\"", "not a size"}));
  EXPECT_TRUE(rejects("[budget]\nmargin_step = -1\n", {"budget.margin_step = -1", "not a size"}));
  EXPECT_TRUE(rejects("[budget]\nhysteresis = true\n", {"budget.hysteresis = true", "not a size"}));
  EXPECT_TRUE(rejects("[budget]\ngive_back_after = 0\n", {"budget.give_back_after = 0", "integer from 1 to"}));
  EXPECT_TRUE(rejects("[budget]\nclean_period = \"0s\"\n", {"budget.clean_period = \"0s\"", "must be positive"}));
  EXPECT_TRUE(rejects("[budget]\nprobe_max_age = \"soon\"\n", {"budget.probe_max_age = \"soon\"", "not a duration"}));
  EXPECT_TRUE(rejects("[budget]\ngrowth_window = -5\n", {"budget.growth_window = -5", "negative"}));
  EXPECT_TRUE(
      rejects("[budget]\nstate_file = \"state.json\"\n", {"budget.state_file = \"state.json\"", "absolute path"}));
  EXPECT_TRUE(rejects("[budget]\nfile = 5\n", {"budget.file = 5", "absolute path"}));
  EXPECT_TRUE(rejects("[budget]\ncgroup = 7\n", {"budget.cgroup = 7", "cgroup path"}));
  EXPECT_TRUE(rejects("[budget]\nenabled = \"yes\"\n", {"budget.enabled = \"yes\"", "boolean"}));
  EXPECT_TRUE(rejects("[budget]\nmargin = \"1GiB\"\n",
                      {"unknown key \"budget.margin\"", "known in [budget]: enabled, cgroup, margin_floor"}));
  EXPECT_TRUE(rejects("[budget]\nmax_retries = 3\n", {"unknown key \"budget.max_retries\""}));
  // Empty strings are the defaults, not errors.
  auto r = parseAgentConfig("[budget]\ncgroup = \"\"\nstate_file = \"\"\nfile = \"\"\ngrowth_window = 0\n", kSource);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_TRUE(r->budget.cgroup.empty());
  EXPECT_EQ(r->budget.policy.growth_window, milliseconds(0));
}

TEST(ConfigFlags, BudgetKeys) {
  AgentConfig cfg;
  ASSERT_TRUE(applyConfigFlag(cfg, keyNamed("budget.margin_floor"), {"16MiB"}));
  EXPECT_EQ(cfg.budget.policy.margin_floor, 16u << 20);
  ASSERT_TRUE(applyConfigFlag(cfg, keyNamed("budget.margin_growth"), {"1.75"}));
  EXPECT_EQ(cfg.budget.policy.margin_growth, 1.75);
  ASSERT_TRUE(applyConfigFlag(cfg, keyNamed("budget.hysteresis"), {"1MiB"}));
  EXPECT_EQ(cfg.budget.policy.hysteresis_bytes, 1u << 20);
  ASSERT_TRUE(applyConfigFlag(cfg, keyNamed("budget.clean_period"), {"90s"}));
  EXPECT_EQ(cfg.budget.policy.clean_period, milliseconds(90000));
  ASSERT_TRUE(applyConfigFlag(cfg, keyNamed("budget.cgroup"), {"/a/b/"}));
  EXPECT_EQ(cfg.budget.cgroup, "/a/b");
  ASSERT_TRUE(applyConfigFlag(cfg, keyNamed("budget.enabled"), {"off"}));
  EXPECT_FALSE(cfg.budget.enabled);
  EXPECT_EQ(keyNamed("budget.margin_floor").flag, "--budget.margin-floor");
  EXPECT_EQ(keyNamed("budget.give_back_after").kind, "count");
  EXPECT_EQ(keyNamed("budget.margin_growth").kind, "number");
  EXPECT_NE(keyNamed("budget.margin_floor").help.find("default 1GiB"), std::string::npos)
      << keyNamed("budget.margin_floor").help;
  EXPECT_NE(keyNamed("budget.clean_period").help.find("default 1h"), std::string::npos)
      << keyNamed("budget.clean_period").help;

  EXPECT_TRUE(flagRejects("budget.margin_growth", {"0.5"}, {"--budget.margin-growth 0.5: must be between 1 and 100"}));
  EXPECT_TRUE(flagRejects("budget.overhead_factor", {"x"}, {"--budget.overhead-factor x", "must be a number"}));
  EXPECT_TRUE(
      flagRejects("budget.margin_floor", {"16 parsecs"}, {"--budget.margin-floor \"16 parsecs\"", "not a size"}));
  EXPECT_TRUE(flagRejects("budget.clean_period", {"0"}, {"--budget.clean-period 0", "must be positive"}));
  EXPECT_TRUE(flagRejects("budget.file", {"budget.txt"}, {"--budget.file budget.txt", "absolute path"}));
  // Nothing changes on error.
  AgentConfig keep;
  keep.budget.policy.margin_growth = 2;
  EXPECT_FALSE(applyConfigFlag(keep, keyNamed("budget.margin_growth"), {"0.5"}));
  EXPECT_EQ(keep.budget.policy.margin_growth, 2.0);
}

TEST(ConfigErrors, TomlSyntaxNamesLineAndColumn) {
  EXPECT_TRUE(rejects("smaps = true\ninterval = \n", {"invalid TOML at line 2, column"}));
  EXPECT_TRUE(rejects("smaps = true\nsmaps = false\n", {"line 2", "smaps"}));
  EXPECT_TRUE(rejects("[sensors\n", {"line 1"}));
}

TEST(ConfigErrors, SourceDefaultsWhenUnnamed) {
  auto r = parseAgentConfig("smaps = 1\n", "");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message.rfind("config: smaps = 1: ", 0), 0u) << r.error().message;
}

TEST(ConfigLoad, ReadsAFileAndNamesItInErrors) {
  testing::FixtureTree tree;
  tree.write("/etc/agent.toml", "interval = \"10s\"\n[sensors]\noom_ring_bytes = 1000\n");
  tree.write("/etc/good.toml", "interval = \"10s\"\n");
  std::string path = tree.root() + "/etc/agent.toml";
  auto bad = loadAgentConfig(path);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            path + ": sensors.oom_ring_bytes = 1000: must be a power of two, at least 4096 (e.g. \"256KiB\")");
  auto good = loadAgentConfig(tree.root() + "/etc/good.toml");
  ASSERT_TRUE(good) << good.error().describe();
  EXPECT_EQ(good->interval, milliseconds(10000));
  auto missing = loadAgentConfig(tree.root() + "/etc/none.toml");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ENOENT);
  EXPECT_NE(missing.error().message.find("/etc/none.toml"), std::string::npos);
  auto dir = loadAgentConfig(tree.root() + "/etc");
  ASSERT_FALSE(dir);
  EXPECT_EQ(dir.error().code, EISDIR);
}

TEST(ConfigFlags, ScalarsOverride) {
  AgentConfig cfg;
  ASSERT_TRUE(applyConfigFlag(cfg, keyNamed("interval"), {"2s"}));
  EXPECT_EQ(cfg.interval, milliseconds(2000));
  ASSERT_TRUE(applyConfigFlag(cfg, keyNamed("listen"), {"[::1]:9000"}));
  EXPECT_EQ(cfg.listen.text(), "[::1]:9000");
  ASSERT_TRUE(applyConfigFlag(cfg, keyNamed("smaps"), {"false"}));
  EXPECT_FALSE(cfg.smaps);
  ASSERT_TRUE(applyConfigFlag(cfg, keyNamed("smaps"), {}));
  EXPECT_TRUE(cfg.smaps) << "a bool flag without a value is true";
  ASSERT_TRUE(applyConfigFlag(cfg, keyNamed("sensors.bpf"), {"0"}));
  EXPECT_FALSE(cfg.sensors.bpf);
  ASSERT_TRUE(applyConfigFlag(cfg, keyNamed("sensors.oom_ring_bytes"), {"512KiB"}));
  EXPECT_EQ(cfg.sensors.oom_ring_bytes, 512u << 10);
  ASSERT_TRUE(applyConfigFlag(cfg, keyNamed("metrics.max_series"), {"100"}));
  EXPECT_EQ(cfg.max_series, 100u);
  ASSERT_TRUE(applyConfigFlag(cfg, keyNamed("log_format"), {"json"}));
  EXPECT_EQ(cfg.log_format, LogFormat::kJson);
}

TEST(ConfigFlags, ListsReplaceTheFileValue) {
  auto r = parseAgentConfig("cgroups = [\"/a\", \"/b\"]\n[roles]\nrules = [\"prover=comm:x\"]\n", kSource);
  ASSERT_TRUE(r) << r.error().describe();
  AgentConfig cfg = *r;
  ASSERT_TRUE(applyConfigFlag(cfg, keyNamed("cgroups"), {"/c"}));
  EXPECT_EQ(cfg.cgroups, std::vector<std::string>{"/c"});
  ASSERT_TRUE(applyConfigFlag(cfg, keyNamed("roles.rules"), {"system=cgroup:/system.slice", "prover=cmdline:cuzk\\s"}));
  ASSERT_EQ(cfg.role_rules.size(), 2u);
  EXPECT_EQ(cfg.role_rules[0].text(), "system=cgroup:/system.slice");
  ASSERT_TRUE(applyConfigFlag(cfg, keyNamed("sensors.cuda_libraries"), {"/a/libcuda.so.1", "/b/libcuda.so.1"}));
  EXPECT_EQ(cfg.sensors.cuda_libraries.size(), 2u);
}

TEST(ConfigFlags, ErrorsNameTheFlagAndLeaveTheConfigAlone) {
  EXPECT_TRUE(flagRejects("log_format", {"json2"}, {"--log-format json2: must be one of text, json"}));
  EXPECT_TRUE(flagRejects("interval", {"fast"}, {"--interval fast: not a duration"}));
  EXPECT_TRUE(flagRejects("interval", {"10ms"}, {"--interval 10ms", "between 100ms and 1h"}));
  EXPECT_TRUE(flagRejects("interval", {"1s", "2s"}, {"--interval 1s 2s", "takes one value"}));
  EXPECT_TRUE(flagRejects("listen", {"localhost"}, {"--listen localhost", "no port"}));
  EXPECT_TRUE(flagRejects("smaps", {"maybe"}, {"--smaps maybe", "true or false"}));
  EXPECT_TRUE(flagRejects("sensors.oom_ring_bytes", {"1000"}, {"--sensors.oom-ring-bytes 1000", "power of two"}));
  EXPECT_TRUE(flagRejects("sensors.max_processes", {"-1"}, {"--sensors.max-processes -1", "integer from 1"}));
  EXPECT_TRUE(flagRejects("roles.rules", {"prover=comm:x", "nope"}, {"--role-rule nope", "ROLE=KIND:VALUE"}));
  EXPECT_TRUE(flagRejects("sensors.cuda_runtime_targets", {"rel/x"}, {"--cuda-runtime-target rel/x", "absolute"}));
  EXPECT_TRUE(flagRejects("sensors.nvml_library", {"lib/libnvidia-ml.so.1"},
                          {"--sensors.nvml-library lib/libnvidia-ml.so.1", "library name or an absolute path"}));
  EXPECT_TRUE(flagRejects("cgroups", {""}, {"--cgroup \"\"", "cgroup path"}));

  AgentConfig cfg;
  cfg.cgroups = {"/keep"};
  EXPECT_FALSE(applyConfigFlag(cfg, keyNamed("cgroups"), {"/ok", ""}));
  EXPECT_EQ(cfg.cgroups, std::vector<std::string>{"/keep"});

  ConfigKey fake{"nope", "--nope", "bool", "", false};
  auto st = applyConfigFlag(cfg, fake, {"1"});
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("--nope"), std::string::npos);
}

TEST(ConfigKeys, FlagsAreUniqueAndMechanical) {
  std::set<std::string> names;
  std::set<std::string> flags;
  for (const ConfigKey& k : configKeys()) {
    EXPECT_TRUE(names.insert(k.name).second) << k.name;
    EXPECT_TRUE(flags.insert(k.flag).second) << k.flag;
    EXPECT_FALSE(k.help.empty()) << k.name;
    EXPECT_FALSE(k.kind.empty()) << k.name;
    ASSERT_GT(k.flag.size(), 2u);
    EXPECT_EQ(k.flag.substr(0, 2), "--");
    EXPECT_EQ(k.repeatable, k.kind == "list") << k.name;
    // The one flag spelt as the Prometheus exporters spell theirs.
    if (!k.repeatable && k.name != "web.config_file") {
      std::string expected = "--" + k.name;
      for (char& c : expected)
        if (c == '_') c = '-';
      EXPECT_EQ(k.flag, expected);
    }
  }
  EXPECT_EQ(keyNamed("web.config_file").flag, "--web.config.file");
  EXPECT_EQ(keyNamed("cgroups").flag, "--cgroup");
  EXPECT_EQ(keyNamed("roles.rules").flag, "--role-rule");
  EXPECT_EQ(keyNamed("sensors.cuda_libraries").flag, "--cuda-library");
  EXPECT_EQ(keyNamed("sensors.cuda_runtime_targets").flag, "--cuda-runtime-target");
  EXPECT_EQ(keyNamed("sensors.oom_ring_bytes").flag, "--sensors.oom-ring-bytes");
  EXPECT_EQ(keyNamed("interval").kind, "duration");
  EXPECT_EQ(keyNamed("log_format").kind, "enum(text|json)");
  EXPECT_EQ(names.count("sensors.tracepoints"), 0u);
}

TEST(ConfigKeys, EveryKeyOfEveryTableHasAFlag) {
  const std::set<std::string> expected = {"listen",
                                          "interval",
                                          "cgroups",
                                          "smaps",
                                          "max_processes",
                                          "log_format",
                                          "log_level",
                                          "roles.rules",
                                          "sensors.bpf",
                                          "sensors.kmsg",
                                          "sensors.faults",
                                          "sensors.mmap",
                                          "sensors.rss",
                                          "sensors.cuda",
                                          "sensors.cuda_libraries",
                                          "sensors.cuda_runtime_targets",
                                          "sensors.nvml",
                                          "sensors.nvml_library",
                                          "sensors.oom_ring_bytes",
                                          "sensors.exit_ring_bytes",
                                          "sensors.max_processes",
                                          "sensors.max_cuda_allocations",
                                          "sensors.max_tracked_cgroups",
                                          "metrics.top_processes",
                                          "metrics.max_cgroups",
                                          "metrics.max_series",
                                          "metrics.recent_ooms",
                                          "probe.enabled",
                                          "probe.min_interval",
                                          "probe.cgroup",
                                          "warning.enabled",
                                          "warning.eta",
                                          "warning.window",
                                          "warning.fast_interval",
                                          "warning.on_warning",
                                          "budget.enabled",
                                          "budget.cgroup",
                                          "budget.margin_floor",
                                          "budget.margin_growth",
                                          "budget.margin_step",
                                          "budget.overhead_factor",
                                          "budget.give_back_after",
                                          "budget.clean_period",
                                          "budget.growth_window",
                                          "budget.forecast_horizon",
                                          "budget.probe_max_age",
                                          "budget.hysteresis",
                                          "budget.state_file",
                                          "budget.file",
                                          "journal.enabled",
                                          "journal.path",
                                          "journal.max_bytes",
                                          "journal.flight_window",
                                          "journal.catch_up",
                                          "events.output",
                                          "events.max_bytes",
                                          "events.max_files",
                                          "events.journald",
                                          "prover.self_report",
                                          "pss_max_age",
                                          "pss_step",
                                          "pss_reads_per_second",
                                          "process_walk_budget",
                                          "process_walk_max_interval",
                                          "sensors.tasks",
                                          "web.config_file",
                                          "workloads.docker_socket",
                                          "workloads.kubernetes_logs",
                                          "workloads.podman_socket"};
  std::set<std::string> got;
  for (const ConfigKey& k : configKeys()) {
    got.insert(k.name);
    EXPECT_FALSE(k.flag.empty()) << k.name;
  }
  EXPECT_EQ(got, expected);
}

TEST(DurationParse, Units) {
  EXPECT_EQ(parseDuration("5s").value(), milliseconds(5000));
  EXPECT_EQ(parseDuration("500ms").value(), milliseconds(500));
  EXPECT_EQ(parseDuration("2m").value(), milliseconds(120000));
  EXPECT_EQ(parseDuration("1h").value(), milliseconds(3600000));
  EXPECT_EQ(parseDuration("1.5s").value(), milliseconds(1500));
  EXPECT_EQ(parseDuration("10").value(), milliseconds(10000));
  EXPECT_EQ(parseDuration("0.5").value(), milliseconds(500));
  EXPECT_EQ(parseDuration(" 3 s ").value(), milliseconds(3000));
  EXPECT_EQ(parseDuration("1m30s").value(), milliseconds(90000));
  EXPECT_EQ(parseDuration("0s").value(), milliseconds(0)) << "zero is the caller's to refuse";
}

TEST(DurationParse, RejectsGarbage) {
  for (std::string_view bad : {"", " ", "-5s", "-1", "fast", "5x", "5us", "s", ".s", "1.2.3s", "5S", "1m 5", "+5s",
                               "5s5", "1e3s", "nan", "inf", "99999999999999h"}) {
    auto r = parseDuration(bad);
    EXPECT_FALSE(r) << "\"" << bad << "\" -> " << r.value().count();
    if (!r) {
      EXPECT_NE(r.error().message.find("duration \"" + std::string(bad) + "\""), std::string::npos)
          << r.error().message;
    }
  }
  EXPECT_NE(parseDuration("5x").error().message.find("unknown unit \"x\""), std::string::npos);
}

TEST(ListenAddressParse, Forms) {
  auto v4 = parseListenAddress("127.0.0.1:9464");
  ASSERT_TRUE(v4) << v4.error().describe();
  EXPECT_EQ(v4->host, "127.0.0.1");
  EXPECT_EQ(v4->port, 9464);
  EXPECT_EQ(v4->text(), "127.0.0.1:9464");
  auto any = parseListenAddress("0.0.0.0:0");
  ASSERT_TRUE(any);
  EXPECT_EQ(any->port, 0);
  auto v6 = parseListenAddress("[::1]:9464");
  ASSERT_TRUE(v6) << v6.error().describe();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 9464);
  EXPECT_EQ(v6->text(), "[::1]:9464");
  auto all6 = parseListenAddress("[::]:65535");
  ASSERT_TRUE(all6);
  EXPECT_EQ(all6->port, 65535);
  auto name = parseListenAddress("localhost:9464");
  ASSERT_TRUE(name);
  EXPECT_EQ(name->host, "localhost");
  EXPECT_EQ(ListenAddress{}.text(), "127.0.0.1:9464");
}

TEST(ListenAddressParse, Rejects) {
  for (std::string_view bad : {"", "127.0.0.1", "127.0.0.1:", "127.0.0.1:70000", "127.0.0.1:-1", "127.0.0.1:+80",
                               "127.0.0.1:http", ":9464", "::1:9464", "[::1]", "[::1]9464", "[::1:9464", "[nope]:80",
                               "300.1.1.1:80", "1.2.3:80", "a b:80", "-host:80", "%%%:80"}) {
    auto r = parseListenAddress(bad);
    EXPECT_FALSE(r) << "\"" << bad << "\" -> " << r.value().text();
    if (!r) {
      EXPECT_NE(r.error().message.find("listen address \"" + std::string(bad) + "\""), std::string::npos)
          << r.error().message;
    }
  }
  EXPECT_NE(parseListenAddress("1.2.3.4:70000").error().message.find("0 to 65535"), std::string::npos);
}

TEST(ConfigMisc, LogFormatNames) {
  EXPECT_STREQ(toString(LogFormat::kText), "text");
  EXPECT_STREQ(toString(LogFormat::kJson), "json");
}

}  // namespace
}  // namespace headroom
