// `headroom agent`: the sidecar daemon. Its main thread runs the sampling loop (agent/daemon/
// agent.cpp): every interval it collects, adds what the sensors know, builds the snapshot, reads
// the prover's self-report, feeds the flight recorder, decides the prover's budget and updates
// the exporter; between samples it waits on the sensors and hands each OOM kill to the kill path
// (incidents/kill_path.h), which names, records and publishes it. The HTTP threads answer from
// what both published (daemon/http_api.h). SIGTERM/SIGINT stop it, SIGHUP reloads the
// configuration.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "headroom/config/config.h"
#include "headroom/util/result.h"

namespace headroom {

struct AgentSetup {
  std::string root = "/";  // where /proc and /sys are read (--root)
  AgentConfig config;
  // Reads the configuration anew at SIGHUP (the file with the flags over it); an error keeps the
  // running one. Absent: a reload keeps it too.
  std::function<Result<AgentConfig>()> reload;
  std::string config_source;             // how the log names it: "/etc/headroom/agent.toml", or ""
  std::optional<std::string> log_level;  // given on the command line: wins over the config's
};

class Agent {
 public:
  // Opens the root and the memory hierarchy under it (errors are bad input) and the agent's own
  // view of the live system.
  static Result<std::unique_ptr<Agent>> create(AgentSetup setup);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Attaches the sensors, opens the journal, serves, and samples until SIGTERM or SIGINT. An
  // error: the listen address could not be served.
  Status run();

 private:
  struct Impl;
  explicit Agent(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// SIGTERM/SIGINT stop the agent, SIGHUP reloads; SIGPIPE is ignored (a scraper that hangs up
// mid-answer must not kill it). Installed before anything slow, so an early SIGHUP cannot.
void installAgentSignalHandlers();

}  // namespace headroom
