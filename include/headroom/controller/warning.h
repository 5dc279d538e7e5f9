// The warning before an OOM kill, as the prover receives it: the settings of the time to OOM
// ([warning] in the agent's config, the flags of `headroom run`), and the hook that tells the
// prover (docs/prover-contract.md): a command through the shell, a signal, or a POST to a URL,
// each with the situation as JSON, none ever waited for by the caller.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "headroom/model/oom_forecast.h"
#include "headroom/util/result.h"

namespace headroom {

// [warning]
struct WarningSettings {
  bool enabled = true;
  std::chrono::milliseconds eta{30000};          // a warning starts under this time to OOM
  std::chrono::milliseconds window{30000};       // the growth's trend is taken over this
  std::chrono::milliseconds fast_interval{500};  // a cgroup near its bound is read this often
  std::string on_warning;                        // the hook, as given; "": none

  bool operator==(const WarningSettings&) const = default;
};
ForecastPolicy forecastPolicyOf(const WarningSettings& s);
// Errors name the setting and the value.
Status validate(const WarningSettings& s);

struct WarningHook {
  enum class Kind { kNone, kCommand, kSignal, kUrl };
  Kind kind = Kind::kNone;
  std::string text;  // as given
  int signal = 0;    // kSignal
};
// "CMD" (run through /bin/sh -c), "signal:USR1" (a name with or without SIG, or a number; KILL
// and STOP are refused: a warning never stops the prover), "http://..." or "https://..." (POSTed).
// "" is no hook. An error says what is allowed (the caller names the flag or key and the value).
Result<WarningHook> parseWarningHook(std::string_view spec);

// Fires hooks without waiting for them: a signal is sent at once; a command is started with the
// situation on its stdin and in $HEADROOM_WARNING, and reaped by poll() (killed past its
// timeout); a POST runs on a thread of its own.
class HookRunner {
 public:
  explicit HookRunner(std::chrono::milliseconds timeout = std::chrono::seconds(10)) : timeout_(timeout) {}
  // Kills a command still running and waits for a POST in flight (bounded by the timeout).
  ~HookRunner();
  HookRunner(const HookRunner&) = delete;
  HookRunner& operator=(const HookRunner&) = delete;

  struct Outcome {
    std::string hook;  // as given
    bool ok = false;
    std::string detail;  // "exited 0 after 0.12 s", "SIGUSR1 sent to pid 123", "POST answered 200"
  };
  // `targets`: the prover's processes, for a signal (none: the outcome says so).
  void fire(const WarningHook& h, const nlohmann::json& situation, const std::vector<pid_t>& targets);
  // The outcomes since the last call: a signal's at once, a command's when it ends, a POST's when
  // answered.
  std::vector<Outcome> poll();
  // Hooks fired and not ended yet.
  std::size_t running() const;

 private:
  struct Command {
    pid_t pid = 0;
    std::chrono::steady_clock::time_point started, deadline;
    std::string hook;
  };
  std::chrono::milliseconds timeout_;
  std::vector<Command> commands_;
  std::vector<std::thread> posts_;
  mutable std::mutex mu_;
  std::vector<Outcome> done_;      // under mu_
  std::size_t posts_running_ = 0;  // under mu_
};

}  // namespace headroom
