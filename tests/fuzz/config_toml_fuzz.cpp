// The agent's TOML configuration through the real key table: parsed, or refused with an error
// naming the key; and a configuration that parses, written back key by key as configValue says
// (what docs/configuration.md shows), parses to the same values.
#include <string>

#include "fuzz_support.h"
#include "headroom/config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace headroom;
  auto cfg = parseAgentConfig(fuzz::text(data, size), "fuzz.toml");
  if (!cfg) {
    fuzz::require(!cfg.error().message.empty(), "a refusal says why");
    return 0;
  }
  // The keys whose value is not the default, as a user would write them (a default like
  // probe.cgroup's "" can only be left out).
  static const AgentConfig kDefaults;
  std::string written;
  for (const ConfigKey& k : configKeys()) {
    auto v = configValue(*cfg, k.name);
    fuzz::require(v.has_value(), "every key of the table has a value");
    if (*v != *configValue(kDefaults, k.name)) written += k.name + " = " + *v + "\n";
  }
  auto again = parseAgentConfig(written, "fuzz.toml (written back)");
  if (!again) std::fprintf(stderr, "%s\n---\n%s", again.error().describe().c_str(), written.c_str());
  fuzz::require(again.has_value(), "a configuration written back parses");
  for (const ConfigKey& k : configKeys()) {
    auto a = configValue(*cfg, k.name);
    auto b = configValue(*again, k.name);
    if (*a != *b) std::fprintf(stderr, "%s: %s, written back %s\n", k.name.c_str(), a->c_str(), b->c_str());
    fuzz::require(*a == *b, "a configuration written back has the same values");
  }
  return 0;
}
